"""Benchmark: does staleness hurt T1's PPO, and does the importance correction help? The one-turn bandit.

Run (from the repository root):

    uv run python tools/bench/bench_staleness.py [--seeds 5] [--steps 40] [--batch 16] [--vocab 4096]
        [--staleness 0,1,4,8] [--corrections none,tis] [--recipe recipes/tiny-cpu.yaml]
        [--jobs N] [--curves CURVES.json] [--png CURVES.png]

The bandit is `bench_learning`'s (imported, not copied): the tiny recipe's model answers a fixed prompt with
one token, reward 1 when ``id % 8`` is the seed's target (chance 1/8), every update a real
`t1_trainer.step.ppo_step` on a `TorchBackend` with R3 (arm ``ppo`` of `bench_learning`: actor LR 1e-2,
critic LR 1e-3). Staleness k is simulated as a k-ahead rollout would give it to the trainer
(`t1.run.staleness`): the trainer keeps a queue of its weight snapshots, and step t samples with the weights
of version ``t - min(t, k)`` (the pipeline's ramp 0, 1, ..., k - 1, then k), the samples carry that version,
and ``ppo_step`` trains them at that staleness with ``max_staleness`` k. Each step then publishes (the version
advances by one). Correction ``none`` is T1 as run (at staleness >= 1 the PPO ratio's denominator is the
rollout's log-probs); ``tis`` is ``ppo.off_policy: {kind: tis, level: token, cap: 2}`` (the denominator is the
trainer's recomputation and the weight ``min(pi_train / pi_rollout, 2)`` carries the staleness).

Every arm runs the same seeds (same initial model, prompt, target and sampler seed), so arms are paired by
seed. Printed per arm: success over the first and the last 5 steps (median and range over seeds), the OLS
slope of success per step (`bench_learning.trend`), and a paired t-test over seeds (Student t, two-sided) of
the end success against the staleness-0 arm without correction, and of ``tis`` against ``none`` at the same
staleness. The last line is one JSON object. Nothing asserts. ``--jobs N`` runs the (arm, seed) runs in N
processes of one thread each (every run is seeded; a worker runs it on one thread);
``--curves`` writes every run's success per step, ``--png`` plots each arm's median curve over seeds.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import copy
import json
import math
import sys
import time
from collections import deque
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_learning import ARMS, MODULUS, PROMPT_LEN, build_backend, sample_batch, trend  # noqa: E402

WINDOW = 5
"""Steps averaged for the start and end success."""


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (Lentz's method)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-12:
            break
    return h


def t_two_sided_p(t: float, dof: int) -> float:
    """Two-sided p of Student's t with ``dof`` degrees of freedom: ``I_{dof/(dof+t^2)}(dof/2, 1/2)``."""
    if not math.isfinite(t):
        return 0.0
    x, a, b = dof / (dof + t * t), dof / 2.0, 0.5
    if x <= 0.0 or x >= 1.0:  # |t| infinite, or t = 0
        return 0.0 if x <= 0.0 else 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return min(1.0, front * _betacf(a, b, x) / a)
    return min(1.0, 1.0 - front * _betacf(b, a, 1.0 - x) / b)


def paired_t(x: list[float], y: list[float]) -> dict[str, float]:
    """Paired t-test of ``x - y`` over seeds: mean difference, t, two-sided p (Student t, n - 1 dof)."""
    d = np.asarray(x, dtype=float) - np.asarray(y, dtype=float)
    n = len(d)
    mean = float(d.mean())
    sd = float(d.std(ddof=1)) if n > 1 else 0.0
    if sd == 0.0:  # every seed moved by the same amount: no t (None) unless nothing moved
        return {"diff": mean, "t": 0.0 if mean == 0 else None, "p": 1.0 if mean == 0 else None}
    t = mean / (sd / math.sqrt(n))
    return {"diff": mean, "t": t, "p": t_two_sided_p(t, n - 1)}


def run_stale(
    k: int, correction: str, *, seed: int, steps: int, batch: int, vocab: int, recipe: Path
) -> dict:
    """One seed at staleness ``k`` with ``correction``: success per step and the staleness trained at."""
    from t1_spec import NoOffPolicySpec, TISSpec
    from t1_trainer.step import ppo_step

    backend, ppo = build_backend(recipe, vocab=vocab, arm=ARMS["ppo"], seed=seed, batch=batch)
    off = TISSpec(level="token", cap=2.0) if correction == "tis" else NoOffPolicySpec()
    ppo = ppo.model_copy(update={"off_policy": off})
    backend.ppo = ppo  # the backend applies the correction it holds (`TorchBackend.update_actor`)
    rng = np.random.default_rng(seed)
    prompt = [int(x) for x in rng.integers(10, vocab, size=PROMPT_LEN)]
    target = int(rng.integers(0, MODULUS))
    gen = torch.Generator().manual_seed(seed)
    sampler = copy.deepcopy(backend.actor)
    # the weights of the last k + 1 versions, oldest first: version t - min(t, k) samples at step t
    snapshots: deque[tuple[int, dict]] = deque(maxlen=k + 1)
    success, ages, weights, wmean = [], [], [], []
    for t in range(steps):
        snapshots.append((t, {n: p.detach().clone() for n, p in backend.actor.state_dict().items()}))
        version, state = snapshots[0]
        sampler.load_state_dict(state)
        samples = sample_batch(
            SimpleNamespace(actor=sampler, device=backend.device, policy_version=version), prompt, batch, gen
        )
        right = [int(s.token_ids[-1]) % MODULUS == target for s in samples]
        success.append(float(np.mean(right)))
        for s, r in zip(samples, right, strict=True):
            s.reward = float(r)
        m = ppo_step(backend, samples, ppo, staleness=t - version, max_staleness=max(k, 0))
        ages.append(int(m["staleness"]))
        weights.append(float(m.get("actor/off_policy_truncated_fraction", float("nan"))))
        wmean.append(float(m.get("actor/off_policy_weight_mean", float("nan"))))
        backend.policy_version += 1  # the publication of this step (no receivers in the bandit)
    return {"success": success, "staleness": ages, "tis_truncated": weights, "tis_weight_mean": wmean}


def arm_figures(runs: list[dict], reference: list[dict] | None, twin: list[dict] | None) -> dict[str, Any]:
    """Start, end, slope (median and range over seeds) and the paired tests of the end success."""

    def mmm(v: list[float]) -> dict[str, float]:
        return {"min": float(np.min(v)), "median": float(np.median(v)), "max": float(np.max(v))}

    def ends(rs: list[dict]) -> list[float]:
        return [float(np.mean(r["success"][-WINDOW:])) for r in rs]

    fig: dict[str, Any] = {
        "start": mmm([float(np.mean(r["success"][:WINDOW])) for r in runs]),
        "end": mmm(ends(runs)),
        "slope": mmm([trend(r["success"])["slope"] for r in runs]),
        "staleness_last": runs[0]["staleness"][-1],
        "seeds": len(runs),
    }
    if reference is not None:
        fig["vs_s0_none"] = paired_t(ends(runs), ends(reference))
    if twin is not None:
        fig["tis_vs_none"] = paired_t(ends(runs), ends(twin))
    trunc = [x for r in runs for x in r["tis_truncated"] if math.isfinite(x)]
    if trunc:
        fig["tis_truncated_share"] = float(np.mean(trunc))
        fig["tis_weight_mean"] = float(np.nanmean([x for r in runs for x in r["tis_weight_mean"]]))
    return fig


def _one_run(job: tuple[int, str, int, int, int, int, str]) -> tuple[int, str, int, dict]:
    """``run_stale`` in a worker process of one thread: ``(k, correction, seed, result)``."""
    k, corr, seed, steps, batch, vocab, recipe = job
    torch.set_num_threads(1)
    return (
        k,
        corr,
        seed,
        run_stale(k, corr, seed=seed, steps=steps, batch=batch, vocab=vocab, recipe=Path(recipe)),
    )


def plot_curves(runs: dict[tuple[int, str], list[dict]], path: Path) -> None:
    """Median success per step over seeds, one line per arm (solid: none, dashed: tis), to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    ks = sorted({k for k, _ in runs})
    for (k, corr), rs in sorted(runs.items()):
        curve = np.median(np.asarray([r["success"] for r in rs]), axis=0)
        ax.plot(
            curve,
            color=colors[ks.index(k) % len(colors)],
            linestyle="-" if corr == "none" else "--",
            label=f"k={k} {corr}",
        )
    ax.axhline(1 / MODULUS, color="grey", linewidth=0.8, linestyle=":", label="chance")
    seeds = len(next(iter(runs.values())))
    ax.set(xlabel="PPO step", ylabel=f"success (median of {seeds} seeds)", title="Bandit under staleness k")
    ax.legend(ncol=2, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    ap.add_argument("--seeds", type=int, default=5, help="seeds per arm (paired across arms)")
    ap.add_argument("--steps", type=int, default=40, help="PPO steps per seed")
    ap.add_argument("--batch", type=int, default=16, help="samples per step (one sampled token each)")
    ap.add_argument("--vocab", type=int, default=4096, help="vocabulary size of the tiny model")
    ap.add_argument("--staleness", default="0,1,4,8", help="comma-separated staleness bounds k")
    ap.add_argument("--corrections", default="none,tis", help="comma-separated ppo.off_policy kinds")
    ap.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "tiny-cpu.yaml", help="model's recipe")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes, one thread each (1: in this one)")
    ap.add_argument("--curves", type=Path, default=None, help="write every run's success per step (JSON)")
    ap.add_argument("--png", type=Path, default=None, help="plot each arm's median success curve")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error(f"--jobs must be >= 1, got {args.jobs}")
    unknown = sorted(set(args.corrections.split(",")) - {"none", "tis"})
    if unknown:
        ap.error(f"--corrections: {', '.join(unknown)} not built in this benchmark (none, tis)")
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    ks = [int(k) for k in args.staleness.split(",")]
    corrections = args.corrections.split(",")
    out: dict[str, Any] = {
        "bench": "staleness",
        "seeds": args.seeds,
        "steps": args.steps,
        "batch": args.batch,
        "vocab": args.vocab,
        "test": "paired t-test over seeds of the end success (last 5 steps' mean), Student t, two-sided",
    }
    t_all = time.perf_counter()
    runs: dict[tuple[int, str], list[dict]] = {}
    done: dict[tuple[int, str, int], dict] = {}
    if args.jobs > 1:
        jobs = [
            (k, corr, s, args.steps, args.batch, args.vocab, str(args.recipe))
            for corr in corrections
            for k in ks
            for s in range(args.seeds)
        ]
        with concurrent.futures.ProcessPoolExecutor(args.jobs) as pool:
            for k, corr, s, result in pool.map(_one_run, jobs):
                done[k, corr, s] = result
    for corr in corrections:
        for k in ks:
            t0 = time.perf_counter()
            runs[k, corr] = [
                done.get((k, corr, s))
                or run_stale(
                    k, corr, seed=s, steps=args.steps, batch=args.batch, vocab=args.vocab, recipe=args.recipe
                )
                for s in range(args.seeds)
            ]
            reference = runs.get((ks[0], corrections[0])) if (k, corr) != (ks[0], corrections[0]) else None
            twin = runs.get((k, corrections[0])) if corr != corrections[0] else None
            fig = arm_figures(runs[k, corr], reference, twin)
            fig["wall_s"] = time.perf_counter() - t0
            out[f"s{k}_{corr}"] = fig
            line = (
                f"staleness {k} {corr:<4}: success start {fig['start']['median']:.3f} -> end "
                f"{fig['end']['median']:.3f} [{fig['end']['min']:.3f}, {fig['end']['max']:.3f}]; slope/step "
                f"{fig['slope']['median']:+.4f}"
            )
            for key in ("vs_s0_none", "tis_vs_none"):
                if key in fig:
                    p = fig[key]
                    t_p = "n/a" if p["t"] is None else f"t {p['t']:+.2f} p {p['p']:.2g}"
                    line += f"; {key} diff {p['diff']:+.3f} {t_p}"
            if "tis_truncated_share" in fig:
                line += (
                    f"; TIS weight mean {fig['tis_weight_mean']:.3f}, truncated "
                    f"{fig['tis_truncated_share']:.3f} of loss tokens"
                )
            print(line + f"; {fig['wall_s']:.0f} s", file=sys.stderr, flush=True)
    out["wall_s"] = time.perf_counter() - t_all
    if args.curves is not None:
        curves = {f"s{k}_{corr}": [r["success"] for r in rs] for (k, corr), rs in runs.items()}
        args.curves.write_text(json.dumps({"steps": args.steps, "seeds": args.seeds, "success": curves}))
    if args.png is not None:
        plot_curves(runs, args.png)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
