"""Benchmark: PPO steps of the torch backend on the tiny recipe's model, and the actor's log-prob path.

Run (from the repository root):

    uv run python tools/bench/bench_ppo_step.py [tokens_per_sample=1024] [samples=4] [steps=2]
        [--recipe recipes/tiny-cpu.yaml] [--repeat 1] [--pairs 3]

The model (and the PPO settings) come from the recipe (`t1_spec.load_recipe(...).model`, `.ppo`). Samples are
synthetic but shaped like stitched trajectories: a 200-token prompt, then 150 sampled tokens and a 100-token
observation, repeated; routing and rollout log-probs come from a forward of the sampler (same seed, so the
replayed log-prob gap of the first step is the numerics alone). The default run takes about a minute on two
busy cores, a third of it imports (the parent, and one subprocess per log-prob variant).

Part 1 prints the wall and CPU seconds of each full ``ppo_step`` (split into critic values, critic update,
actor update) and the replay gap. Part 2 measures, side by side in the same run, the part the trainer
optimises: the actor's log-prob path ``t1_trainer.logprobs.lm_head_logprobs`` (loss rows only, chunked,
analytic backward over the whole vocabulary) against a named baseline, "naive" = full-sequence logits
``h @ W^T`` + ``log_softmax`` + ``gather`` with plain autograd. Both run forward + backward on the same hidden
states (sample 0's, from the sampler) and targets, with the same upstream gradient; their log-probs and
gradients are checked equal (rtol = atol = 1e-5) before any figure is printed. Each variant runs in its own
subprocess so its peak memory is its own: peak RSS above the RSS before the call (``VmHWM`` reset through
``/proc/self/clear_refs``; where that is refused, the ``resource.getrusage`` ``ru_maxrss`` delta). The two
subprocesses run ``--pairs`` times, interleaved (`paired.interleave`: t1 naive, then naive t1, ...), and the
ratio baseline / t1 is taken within each pair: min / median / max. Ends with one JSON line. Nothing asserts on
time.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from paired import format_summary, interleave, paired_ratios, summary  # tools/bench/paired.py

from t1_trainer.logprobs import lm_head_logprobs

if TYPE_CHECKING:
    from t1_tito import Sample

# t1_policy, t1_r3, t1_spec, t1_tito and the backend are imported where used: the per-variant subprocesses
# then import only torch (plus what their own variant pulls in), a few seconds less each.

ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-5  # rtol and atol of the log-prob / gradient agreement check


def loss_mask(tokens: int) -> np.ndarray:
    """``[tokens]`` int8: 150 sampled tokens every 250 after a 200-token prompt, and the last token."""
    mask = np.zeros(tokens, np.int8)
    for j in range(200, tokens, 250):
        mask[j : j + 150] = 1
    mask[-1] = 1
    return mask


def make_samples(model: torch.nn.Module, vocab_size: int, tokens: int, count: int) -> list[Sample]:
    """``count`` validated samples of ``tokens`` tokens with routing and log-probs from ``model``."""
    from t1_policy import num_real_tokens
    from t1_r3 import capture_routing
    from t1_tito import Sample

    limit = num_real_tokens(vocab_size)
    out = []
    for i in range(count):
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(0, 5000, (tokens,), generator=g)
        mask = loss_mask(tokens)
        pos = np.flatnonzero(mask)
        lp = np.zeros(tokens, np.float32)
        with capture_routing(model) as rec, torch.no_grad():
            hidden = model.model(input_ids=ids[None]).last_hidden_state[0]
            lp[pos] = lm_head_logprobs(
                hidden[pos - 1], model.lm_head.weight, ids[pos], temperature=1.0, vocab_limit=limit
            ).numpy()
        s = Sample(
            token_ids=ids.numpy().astype(np.int32), loss_mask=mask, rollout_logprobs=lp,
            routing=rec.rows()[: tokens - 1].astype(np.int32), reward=0.1 * i, reward_index=int(pos[-1]),
            task_id=f"task-{i}", family="bench", trial_id=f"trial-{i}", chunk_index=0, policy_version=0,
        )  # fmt: skip
        s.validate()
        out.append(s)
    return out


def head_inputs(model: torch.nn.Module, sample: Sample, vocab_size: int) -> dict[str, Any]:
    """Inputs of the log-prob path for one sample: full-sequence hidden states ``[T, H]``, head, targets."""
    from t1_policy import num_real_tokens

    ids = torch.from_numpy(sample.token_ids.astype(np.int64))
    with torch.no_grad():
        hidden = model.model(input_ids=ids[None]).last_hidden_state[0].float().clone()
    pos = torch.from_numpy(np.flatnonzero(sample.loss_mask)).long()
    coef = torch.randn(pos.shape[0], generator=torch.Generator().manual_seed(0))  # advantage-like weights
    return {
        "hidden": hidden, "weight": model.lm_head.weight.detach().float().clone(), "ids": ids, "pos": pos,
        "coef": coef, "temperature": 1.0, "vocab_limit": num_real_tokens(vocab_size),
    }  # fmt: skip


def run_t1(x: dict[str, Any], h: torch.Tensor, w: torch.Tensor, rows: int | None = None) -> torch.Tensor:
    """The trainer's path: loss rows only, chunked, analytic backward. Returns ``[n]`` log-probs."""
    pos = x["pos"][:rows]
    logp = lm_head_logprobs(
        h[pos - 1], w, x["ids"][pos], temperature=x["temperature"], vocab_limit=x["vocab_limit"]
    )
    (logp * x["coef"][: pos.shape[0]]).sum().backward()
    return logp.detach()


def run_naive(x: dict[str, Any], h: torch.Tensor, w: torch.Tensor, rows: int | None = None) -> torch.Tensor:
    """Baseline: ``[T-1, V]`` logits of every position, ``log_softmax``, gather; plain autograd."""
    pos = x["pos"][:rows]
    end = int(pos[-1]) if rows is not None else h.shape[0] - 1  # warm-up: a short prefix only
    logits = h[:end] @ w.t()  # position j-1 scores token j
    logp_all = torch.log_softmax(logits[:, : x["vocab_limit"]].float() / x["temperature"], dim=-1)
    logp_next = logp_all.gather(-1, x["ids"][1 : end + 1, None]).squeeze(-1)
    logp = logp_next[pos - 1]
    (logp * x["coef"][: pos.shape[0]]).sum().backward()
    return logp.detach()


VARIANTS = {"t1": run_t1, "naive": run_naive}


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} missing from /proc/self/status")


def child(variant: str, inputs: Path, out: Path, repeat: int) -> None:
    """One variant in a fresh process: warm up, then time fwd+bwd and measure its peak RSS increase."""
    x = torch.load(inputs)
    fn = VARIANTS[variant]

    def fresh() -> tuple[torch.Tensor, torch.Tensor]:
        return x["hidden"].clone().requires_grad_(True), x["weight"].clone().requires_grad_(True)

    fn(x, *fresh(), rows=8)  # warm-up: lazy imports, kernels, allocator
    h, w = fresh()
    gc.collect()
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        method, before = "VmHWM", _status_kib("VmRSS")
    except OSError:
        method, before = "ru_maxrss", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    logp = fn(x, h, w)
    best = time.perf_counter() - t0
    after = _status_kib("VmHWM") if method == "VmHWM" else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    torch.save({"logp": logp, "grad_hidden": h.grad, "grad_weight": w.grad}, out)
    for _ in range(repeat - 1):
        h2, w2 = fresh()
        t0 = time.perf_counter()
        fn(x, h2, w2)
        best = min(best, time.perf_counter() - t0)
        del h2, w2
    # peak of the first timed call only: later calls run beside its kept outputs
    print(json.dumps({"seconds": best, "peak_kib": after - before, "method": method}))


def run_child(variant: str, inputs: Path, out: Path, repeat: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--variant", variant, "--inputs", str(inputs), "--out", str(out)]
    res = subprocess.run([*cmd, "--repeat", str(repeat)], check=True, capture_output=True, text=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def check_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> list[str]:
    """Lines ``name: max |diff|``; raises SystemExit when any pair differs beyond `TOL`."""
    lines, bad = [], []
    for name in ("logp", "grad_hidden", "grad_weight"):
        diff = float((a[name] - b[name]).abs().max())
        scale = float(b[name].abs().max())
        lines.append(f"{name:12s} max |t1 - naive| {diff:.2e} (max |naive| {scale:.2e})")
        if not torch.allclose(a[name], b[name], rtol=TOL, atol=TOL):
            bad.append(name)
    if bad:
        raise SystemExit("log-prob paths disagree beyond 1e-5: " + ", ".join(bad) + "\n" + "\n".join(lines))
    return lines


def logprob_path(x: dict[str, Any], repeat: int, pairs: int) -> dict[str, Any]:
    """Part 2: both variants in their own subprocesses, interleaved, checked equal; time, peak, ratio."""
    with tempfile.TemporaryDirectory(prefix="t1-bench-") as tmp:
        inputs = Path(tmp) / "inputs.pt"
        torch.save(x, inputs)
        runs: dict[str, list[dict[str, Any]]] = {"t1": [], "naive": []}

        def arm(v: str):
            def one() -> float:
                runs[v].append(run_child(v, inputs, Path(tmp) / f"{v}.pt", repeat))
                return runs[v][-1]["seconds"]

            return one

        seconds = interleave({"t1": arm("t1"), "naive": arm("naive")}, repeat=pairs)
        outs = {v: torch.load(Path(tmp) / f"{v}.pt") for v in ("t1", "naive")}
        checks = check_same(outs["t1"], outs["naive"])
    ratio = paired_ratios(seconds["naive"], seconds["t1"])
    res = {
        v: {
            "seconds": min(r["seconds"] for r in rs),
            "peak_kib": max(r["peak_kib"] for r in rs),
            "method": rs[0]["method"],
        }
        for v, rs in runs.items()
    }
    n, t = int(x["pos"].shape[0]), int(x["hidden"].shape[0])
    v_lim, v_all = x["vocab_limit"], int(x["weight"].shape[0])
    print(
        f"\nactor log-prob path, fwd+bwd: sample 0, {t} tokens, {n} loss rows, vocab {v_lim:,} of {v_all:,}"
    )
    print(f"same log-probs and gradients (rtol = atol = {TOL:g}):")
    for line in checks:
        print(f"  {line}")
    t1, nv = res["t1"], res["naive"]
    rows = (("t1 lm_head_logprobs (loss rows, chunked)", t1), ("baseline naive full logits+log_softmax", nv))
    for label, r in rows:
        print(f"{label:41s} {r['seconds']:7.2f} s  peak +{r['peak_kib'] / 2**20:6.2f} GiB")
    print(format_summary("ratio baseline / t1 time (paired)", ratio))
    print(f"memory baseline / t1 {nv['peak_kib'] / max(t1['peak_kib'], 1):6.2f} x")
    print(
        f"(seconds: fastest of {pairs} processes x best of {repeat}; peak = largest RSS high-water mark "
        f"above the RSS before the call, via {t1['method']})"
    )
    return {
        "t1_s": summary(seconds["t1"]),
        "naive_s": summary(seconds["naive"]),
        "naive_over_t1": summary(ratio),
        "peak_gib": {v: r["peak_kib"] / 2**20 for v, r in res.items()},
    }


def main() -> None:
    """Parse the arguments, build samples and backend, time the steps, then the log-prob path."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tokens", type=int, nargs="?", default=1024, help="tokens per sample")
    ap.add_argument("samples", type=int, nargs="?", default=4)
    ap.add_argument(
        "steps", type=int, nargs="?", default=2, help="PPO steps (2, as the recipe; keeps the run near 60 s)"
    )
    ap.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "tiny-cpu.yaml")
    ap.add_argument("--repeat", type=int, default=1, help="log-prob path: best of N timed runs")
    ap.add_argument("--pairs", type=int, default=3, help="log-prob path: interleaved pairs of subprocesses")
    ap.add_argument("--variant", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    ap.add_argument("--inputs", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:
        child(args.variant, args.inputs, args.out, args.repeat)
        return

    from t1_policy import build_model
    from t1_spec import load_recipe
    from t1_trainer import TorchBackend, ppo_step

    recipe = load_recipe(args.recipe)
    spec = recipe.model
    sampler = build_model(spec, seed=recipe.seed)
    samples = make_samples(sampler, spec.vocab_size, args.tokens, args.samples)
    head = head_inputs(sampler, samples[0], spec.vocab_size)
    del sampler
    backend = TorchBackend(model_spec=spec, ppo_spec=recipe.ppo, seed=recipe.seed)
    loss_tokens = sum(int(s.loss_mask.sum()) for s in samples)
    print(
        f"recipe {args.recipe.name}: {spec.name}, hidden {spec.hidden_size}, {spec.num_layers} layers, "
        f"{spec.num_experts} experts top {spec.top_k}, vocab {spec.vocab_size:,}"
    )
    threads = torch.get_num_threads()
    print(f"{args.samples} samples x {args.tokens} tokens ({loss_tokens} loss tokens), threads {threads}")
    step_s = []
    for k in range(args.steps):
        wall, cpu = time.perf_counter(), time.process_time()
        m = ppo_step(backend, samples, recipe.ppo)
        step_s.append(time.perf_counter() - wall)
        print(
            f"step {k}: wall {time.perf_counter() - wall:.2f} s, cpu {time.process_time() - cpu:.2f} s "
            f"(values {m['trainer/values_time_s']:.2f}, critic {m['critic/time_s']:.2f}, "
            f"actor {m['actor/time_s']:.2f}); gap with replay {m['actor/logprob_gap_replay']:.2e}"
        )
    print(f"peak RSS of the PPO process {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")
    del backend
    gc.collect()
    figures = logprob_path(head, args.repeat, args.pairs)
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"load average {load}")
    print(json.dumps({"bench": "ppo_step", "ppo_step_s": step_s, **figures, "load_average": float(load[0])}))


if __name__ == "__main__":
    main()
