"""Benchmark: step time of the one-step asynchronous vs the synchronous loop on tiny-ray (T1 Appendix 12).

Run (from the repository root):

    OMP_NUM_THREADS=1 uv run python tools/bench/bench_async_loop.py [--steps 3] [overrides ...]

Runs `recipes/tiny-ray.yaml` twice in this process, on a fresh local Ray cluster each time: once with
``runtime.mode=sync`` (rollout, then training, then publication) and once with ``runtime.mode=async``
(rollout of step t+1 overlapping training of step t), with the same seed, steps and overrides. The
baseline is the synchronous run measured in the same invocation.

Per run: the PPO phase's wall time per step (every step barrier to barrier, ``wall_s.step``, plus, for the
asynchronous loop, the rollout of batch 0 that precedes step 0's clock), and the mean rollout and training
times of the steps. Printed ratios:
async / sync step time (the goal is < 1), and the asynchronous step time against the synchronous run's
``max(rollout, train)`` (the ideal overlap, ratio 1) and ``rollout + train`` (no overlap, ratio 1). On a
2-core box the replicas, the sandboxes and the trainer share the same two cores, so the overlap gains less
than on disjoint devices. Ends with one JSON line. Nothing asserts on time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from t1.run.driver import Run
from t1_spec import load_recipe

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "tiny-ray.yaml"


def run_mode(mode: str, steps: int, overrides: list[str]) -> dict[str, float]:
    """Run tiny-ray in ``mode`` and return its step, rollout and training means (seconds)."""
    with tempfile.TemporaryDirectory() as root:
        recipe = load_recipe(
            RECIPE, [f"runtime.mode={mode}", f"ppo.steps={steps}", f"logging.run_root={root}", *overrides]
        )
        t0 = time.monotonic()
        summary = Run(recipe, recipe.model_dump(mode="json", by_alias=True)).run()
        total = time.monotonic() - t0
        rows = [json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text().splitlines()]
    walls = [r["wall_s"] for r in rows if r.get("phase") == "ppo"]
    # The asynchronous loop collects batch 0 before step 0's clock starts; count it, so both modes are
    # charged for the same work: every rollout and every training step of the run.
    ppo_s = sum(w["step"] for w in walls) + (walls[0]["rollout"] if mode == "async" else 0.0)
    return {
        "step_s": ppo_s / len(walls),
        "rollout_s": statistics.mean(w["rollout"] for w in walls),
        "train_s": statistics.mean(w["train"] for w in walls),
        "publish_s": statistics.mean(w["publish"] for w in walls),
        "run_s": total,
        "setup_s": summary.wall_s.get("setup", 0.0),
    }


def main() -> None:
    """Run both modes and print the ratios, then one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="PPO steps per run (>= 2)")
    parser.add_argument("overrides", nargs="*", help="dotlist overrides for both runs")
    args = parser.parse_args()
    sync = run_mode("sync", args.steps, args.overrides)
    asyn = run_mode("async", args.steps, args.overrides)
    ideal = max(sync["rollout_s"], sync["train_s"])
    serial = sync["rollout_s"] + sync["train_s"]
    figures = {
        "steps": args.steps,
        "sync": sync,
        "async": asyn,
        "async_over_sync": asyn["step_s"] / sync["step_s"],
        "async_over_max_rollout_train": asyn["step_s"] / ideal,
        "async_over_sum_rollout_train": asyn["step_s"] / serial,
    }
    print(
        f"sync step {sync['step_s']:.1f} s (rollout {sync['rollout_s']:.1f} s, train {sync['train_s']:.1f} s)"
    )
    a = asyn
    print(f"async step {a['step_s']:.1f} s (rollout {a['rollout_s']:.1f} s, train {a['train_s']:.1f} s)")
    print(
        f"async / sync {figures['async_over_sync']:.2f}; async / max(rollout, train) "
        f"{figures['async_over_max_rollout_train']:.2f}; async / (rollout + train) "
        f"{figures['async_over_sum_rollout_train']:.2f}"
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
