"""Benchmark: step time of the one-step asynchronous vs the synchronous loop on tiny-ray (T1 Appendix 12).

Run (from the repository root):

    OMP_NUM_THREADS=1 uv run python tools/bench/bench_async_loop.py [--steps 3] [--repeat 3]
        [--keep-rows DIR] [overrides ...]

Runs `recipes/tiny-ray.yaml` ``2 x --repeat`` times in this process, on a fresh local Ray cluster each
time, interleaved (`paired.interleave`: sync async, then async sync, ...): ``runtime.mode=sync`` (rollout,
then training, then publication) and ``runtime.mode=async`` (rollout of step t+1 overlapping training of
step t), with the same seed, steps and overrides. The baseline is the synchronous run of the same
repetition; every ratio is taken within its repetition and printed as min / median / max.

Per run: the PPO phase's wall time per step (every step barrier to barrier, ``wall_s.step``, plus, for the
asynchronous loop, the rollout of batch 0 that precedes step 0's clock), and the mean rollout and training
times of the steps. Printed ratios: async / sync step time (the goal is < 1), and the asynchronous step time
against the synchronous run's ``max(rollout, train)``, ``rollout + train`` (no overlap) and the pipeline
model (`pipeline_model_s`: the step-time model plus the publication and an S-step run's fill and drain,
ratio 1 when the overlap is as good as disjoint devices would make it). On a 2-core box the replicas, the
sandboxes and the trainer share the same two cores, so the overlap gains less than on disjoint devices. Each
run's per-step timeline (``timeline_s`` in its rows, when the runtime writes it) gives the seconds training
overlapped a rollout. Ends with one JSON line. Nothing asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from paired import format_summary, interleave, paired_ratios, summary  # tools/bench/paired.py

from t1.run.driver import Run
from t1_spec import load_recipe

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "tiny-ray.yaml"


def run_mode(mode: str, steps: int, overrides: list[str], keep_rows: Path | None = None) -> dict[str, float]:
    """Run tiny-ray in ``mode`` and return its step, rollout and training means (seconds)."""
    with tempfile.TemporaryDirectory() as root:
        recipe = load_recipe(
            RECIPE, [f"runtime.mode={mode}", f"ppo.steps={steps}", f"logging.run_root={root}", *overrides]
        )
        t0 = time.monotonic()
        summary = Run(recipe, recipe.model_dump(mode="json", by_alias=True)).run()
        total = time.monotonic() - t0
        rows = [json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text().splitlines()]
    if keep_rows is not None:  # the rows, for reading the timeline step by step
        keep_rows.mkdir(parents=True, exist_ok=True)
        keep = keep_rows / f"{mode}-{time.strftime('%H%M%S')}.jsonl"
        keep.write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"{mode}: metrics rows kept in {keep}", flush=True)
    ppo = [r for r in rows if r.get("phase") == "ppo"]
    walls = [r["wall_s"] for r in ppo]
    overlaps = [r["timeline_s"]["train_overlap"] for r in ppo if "timeline_s" in r]
    # The asynchronous loop collects batch 0 before step 0's clock starts; count it, so both modes are
    # charged for the same work: every rollout and every training step of the run.
    ppo_s = sum(w["step"] for w in walls) + (walls[0]["rollout"] if mode == "async" else 0.0)
    return {
        "step_s": ppo_s / len(walls),
        "rollout_s": statistics.mean(w["rollout"] for w in walls),
        "train_s": statistics.mean(w["train"] for w in walls),
        "publish_s": statistics.mean(w["publish"] for w in walls),
        "train_wait_s": statistics.mean(w.get("train_wait", 0.0) for w in walls),
        "train_overlap_s": statistics.mean(overlaps) if overlaps else float("nan"),
        "run_s": total,
        "setup_s": summary.wall_s.get("setup", 0.0),
    }


def pipeline_model_s(sync: dict[str, float], steps: int) -> float:
    """The one-step pipeline's mean step time predicted from a synchronous run's phases (seconds).

    With disjoint devices a step of the asynchronous loop takes ``max(R, C)`` (T1 §7.2, ``T_step(n) =
    max(R / n, C / (G - n))`` with R / n and C / (G - n) the measured rollout and training times), plus the
    publication, which no phase overlaps. A run of S steps also pays the pipeline's fill (batch 0's rollout,
    alone) and drain (the last training, with no rollout left to overlap):
    ``(R + (S - 1) max(R, C) + C) / S + P``.
    """
    r, c, p = sync["rollout_s"], sync["train_s"], sync["publish_s"]
    return (r + (steps - 1) * max(r, c) + c) / steps + p


def main() -> None:
    """Run both modes ``--repeat`` times, interleaved, and print the paired ratios, then one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="PPO steps per run (>= 2)")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions of the pair (>= 3 for a spread)")
    parser.add_argument("--keep-rows", type=Path, default=None, help="folder to keep each run's metrics rows")
    parser.add_argument("overrides", nargs="*", help="dotlist overrides for both runs")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    print(f"load average at start: {load:.1f} ({os.cpu_count()} CPUs)")
    runs: dict[str, list[dict[str, float]]] = {"sync": [], "async": []}

    def arm(mode: str):
        def one() -> float:
            runs[mode].append(run_mode(mode, args.steps, args.overrides, args.keep_rows))
            print(f"{mode} run {len(runs[mode])}: {json.dumps(runs[mode][-1])}", flush=True)
            return runs[mode][-1]["step_s"]

        return one

    steps = interleave({"sync": arm("sync"), "async": arm("async")}, repeat=args.repeat)
    ideal = [max(s["rollout_s"], s["train_s"]) for s in runs["sync"]]
    serial = [s["rollout_s"] + s["train_s"] for s in runs["sync"]]
    model = [pipeline_model_s(s, args.steps) for s in runs["sync"]]
    figures = {
        "bench": "async_loop",
        "steps": args.steps,
        "repeat": args.repeat,
        "load_average": load,
        "sync": runs["sync"],
        "async": runs["async"],
        "async_over_sync": summary(paired_ratios(steps["async"], steps["sync"])),
        "async_over_max_rollout_train": summary(paired_ratios(steps["async"], ideal)),
        "async_over_sum_rollout_train": summary(paired_ratios(steps["async"], serial)),
        "async_over_pipeline_model": summary(paired_ratios(steps["async"], model)),
    }
    for mode, rs in runs.items():
        for i, r in enumerate(rs):
            print(
                f"{mode:>5} #{i}: step {r['step_s']:.1f} s (rollout {r['rollout_s']:.1f} s, train "
                f"{r['train_s']:.1f} s, publish {r['publish_s']:.2f} s, train overlapped "
                f"{r['train_overlap_s']:.1f} s)"
            )
    print(format_summary("async / sync (paired)", paired_ratios(steps["async"], steps["sync"]), goal="< 1"))
    print(format_summary("async / max(rollout, train) of sync", paired_ratios(steps["async"], ideal)))
    print(format_summary("async / (rollout + train) of sync", paired_ratios(steps["async"], serial)))
    print(format_summary("async / pipeline model of sync's phases", paired_ratios(steps["async"], model)))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
