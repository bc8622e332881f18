"""Benchmark: does the learning recipe's mean reward rise? `t1 sft`, `t1 train`, and a shuffled control.

Run (from the repository root; the full run takes over an hour on two cores):

    uv run python tools/bench/bench_learning_recipe.py [--recipe recipes/tiny-learn-three-ppo.yaml]
        [--skip-sft] [--steps N] [--arms learn,shuffled] [overrides ...]

A second seed is an override, ``seed=1``: the RL phase samples other trials and the control draws other
permutations (with ``--skip-sft`` the SFT weights stay those already written).

1. ``t1 sft RECIPE --overwrite`` (unless ``--skip-sft`` and the SFT weights exist), printing its first and
   last cross-entropy.
2. ``t1 train RECIPE`` in this process (`t1.run.Run`), reading the per-step ``reward_mean`` of the PPO rows
   of ``metrics.jsonl``.
3. The control: the same run with the rewards of each PPO batch permuted across its trials before the update
   (so the reward no longer belongs to the trajectory that earned it, and its mean is unchanged). The
   permutation wraps `t1_trainer.step.ppo_step`, the function the loop calls for every PPO update, inside
   this process only; the loop has no hook of its own for it. The reward a step reports is the rollout's,
   measured before the update, so the curve shows what the updated policy earns next.

Printed per arm: the reward over the first and the last 3 PPO steps, the OLS slope per step with its t
statistic and two-sided p (t distribution, `bench_learning.trend`), and the wall time; the same start,
end and trend for the share of trials that resolved their task (every assertion passed, read from the run's
trajectories). The last line is one JSON object. Nothing asserts.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_learning import trend  # noqa: E402 - the sibling benchmark's trend test


def shuffled_ppo_step(seed: int) -> Any:
    """A `t1_trainer.step.ppo_step` that permutes the batch's rewards across trials before updating."""
    from t1_trainer import step

    original = step.ppo_step
    rng = random.Random(seed)

    def shuffled(backend: Any, samples: Any, ppo_spec: Any, **kwargs: Any) -> Any:
        trials = sorted({s.trial_id for s in samples})
        rewards = {t: next(s.reward for s in samples if s.trial_id == t) for t in trials}
        moved = list(rewards.values())
        rng.shuffle(moved)
        new = dict(zip(trials, moved, strict=True))
        for s in samples:
            s.reward = new[s.trial_id]
        return original(backend, samples, ppo_spec, **kwargs)

    return original, shuffled


def train(recipe: Path, overrides: list[str], *, control: bool) -> dict[str, Any]:
    """One ``t1 train`` in this process; the PPO steps' mean rewards, resolved shares and the wall time.

    The control's permutations are drawn from the recipe's ``seed``, so ``seed=N`` gives each arm its own
    sampling stream and the control its own permutations.
    """
    from t1.run import Run
    from t1_spec import load_recipe
    from t1_trainer import step

    spec = load_recipe(recipe, overrides)
    original, shuffled = shuffled_ppo_step(spec.seed)
    t0 = time.perf_counter()
    if control:
        step.ppo_step = shuffled
    try:
        run = Run(spec, spec.model_dump(mode="json", by_alias=True))
        run.run()
    finally:
        step.ppo_step = original
    rows = [json.loads(x) for x in (run.run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    rewards = [r.get("reward_mean") for r in rows if r.get("phase", "ppo") == "ppo"]
    curve = [float(x) for x in rewards if x is not None]
    return {
        "run_dir": str(run.run_dir),
        "reward": curve,
        "resolved": resolved_curve(run.run_dir),
        "wall_s": time.perf_counter() - t0,
    }


def resolved_curve(run_dir: Path) -> list[float]:
    """Per PPO step, the share of its scored trials that resolved their task (`resolved`).

    Read from ``trajectories/step-NNNN/*.json``: every trial written that step, so the oversampling tail and
    the trials of a dropped group count too (``reward_mean`` is over the admitted trials only; the two
    agree when every launched trial is admitted). An unscored trial (``reward`` null: an infrastructure
    failure) is not counted, and a record that does not read as JSON is skipped with a warning. A step
    with no scored trial is left out.
    """
    out = []
    for step_dir in sorted((run_dir / "trajectories").glob("step-*")):
        scored = []
        for f in sorted(step_dir.glob("*.json")):
            try:
                record = json.loads(f.read_text())
            except (OSError, ValueError) as exc:
                print(f"warning: {f}: skipped, not a trajectory record ({exc})", file=sys.stderr)
                continue
            if record.get("reward") is not None:
                scored.append(record)
        if scored:
            out.append(sum(resolved(t) for t in scored) / len(scored))
    return out


def resolved(record: dict[str, Any]) -> bool:
    """Whether a scored trajectory record resolved its task: `t1_rollout.evaluate.resolved_outcome`, the rule
    `t1 eval` applies, on the record's fields (T1 §6).

    With a per-assertion report (``fallback`` null): every reported assertion passed, and at least one ran.
    Without one (the reward fell back to the binary outcome, which the record keeps as its reward): the reward
    is 1. Missing counts resolve nothing. The record has no static assertion count, so none is checked.
    """
    from t1_rollout.evaluate import resolved_outcome

    fallback = record.get("fallback")
    binary = record.get("reward") if fallback is not None else None
    passed, total = record.get("assertions_passed") or 0, record.get("assertions_total") or 0
    return resolved_outcome(passed, total, binary, fallback)


def figures(curve: list[float], window: int = 3, *, key: str = "reward") -> dict[str, Any]:
    """Start, end and trend of a per-step curve, the curve itself under ``key``."""
    if len(curve) < 3:
        return {"steps": len(curve), key: curve}
    return {
        "steps": len(curve),
        "start": sum(curve[:window]) / window,
        "end": sum(curve[-window:]) / window,
        **trend(curve),
        key: curve,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "tiny-learn-three-ppo.yaml")
    ap.add_argument("--skip-sft", action="store_true", help="reuse existing SFT weights")
    ap.add_argument("--steps", type=int, default=None, help="override ppo.steps")
    ap.add_argument(
        "--arms",
        default="learn,shuffled",
        help="comma-separated arms to run in order: learn, shuffled (two invocations of one arm each can "
        "run side by side, each with OMP_NUM_THREADS=1)",
    )
    ap.add_argument("overrides", nargs="*", help="dotlist overrides for both phases")
    args = ap.parse_args(argv)
    overrides = list(args.overrides) + ([f"ppo.steps={args.steps}"] if args.steps else [])
    out: dict[str, Any] = {"bench": "learning_recipe", "recipe": str(args.recipe)}
    from t1.run.sft import sft_output
    from t1_spec import load_recipe

    weights = sft_output(load_recipe(args.recipe, overrides)) / "weights" / "actor.safetensors"
    if not (args.skip_sft and weights.is_file()):
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", "t1.cli", "sft", str(args.recipe), *overrides, "--overwrite", "--quiet"]
        subprocess.run(cmd, check=True, cwd=ROOT)
        out["sft_wall_s"] = time.perf_counter() - t0
    summary = json.loads((weights.parent.parent / "summary.json").read_text())
    out["sft"] = {k: summary[k] for k in ("epochs", "loss_first", "loss_last", "token_accuracy_last")}
    print(f"sft: loss {summary['loss_first']:.3f} -> {summary['loss_last']:.3f}", file=sys.stderr)
    known = {"learn": False, "shuffled": True}
    names = [a.strip() for a in args.arms.split(",") if a.strip()]
    if not names or any(a not in known for a in names):
        ap.error(f"--arms {args.arms!r}: give a comma-separated subset of {', '.join(known)}")
    arms = [(a, known[a]) for a in names]
    for name, control in arms:
        res = train(args.recipe, overrides, control=control)
        fig = figures(res["reward"])
        fig["resolved"] = figures(res["resolved"], key="share")
        fig["wall_s"], fig["run_dir"] = res["wall_s"], res["run_dir"]
        out[name] = fig
        if "start" in fig:
            print(
                f"{name:<8} reward {fig['start']:.4f} -> {fig['end']:.4f} over {fig['steps']} steps; slope "
                f"{fig['slope']:+.5f}/step, t {fig['t']:.2f}, p {fig['p']:.2g}; {fig['wall_s']:.0f} s",
                file=sys.stderr,
            )
        if "start" in fig["resolved"]:
            r = fig["resolved"]
            print(
                f"{name:<8} resolved {r['start']:.3f} -> {r['end']:.3f}; slope {r['slope']:+.4f}/step, "
                f"p {r['p']:.2g}",
                file=sys.stderr,
            )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
