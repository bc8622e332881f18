"""Benchmark: does training on generated tasks raise the held-out metric above a shuffled-reward control?

Run (from the repository root; the full benchmark takes many hours on two cores, docs/learning.md):

    uv run python tools/bench/bench_heldout.py --out runs/bench-heldout [--families text,csv,files]
        [--train 60] [--heldout 30] [--arms ppo-critic,grpo,shuffled] [--seeds 0,1,2] [--steps 20]
        [--eval-every 5] [--attempts 2] [--sft-tasks 12] [--recipe recipes/tiny-learn.yaml] [overrides ...]

1. The split (`t1_tasks.synth.synth_split`): ``--train`` generated tasks in OUT/split/train and
   ``--heldout`` in OUT/split/heldout, sharing no (family, seed) instance and no parameter tuple (reused
   when split.json exists and matches; ``--split-only`` writes it and exits, before one process per seed).
2. Per seed, with ``--sft-tasks K > 0``: ``t1 sft`` on the reference solutions of the first K training
   tasks in the split's drawn order (round-robin over the families; OUT/sft-seedS); with 0, no SFT: the
   model starts from the recipe's seeded random weights.
3. Per arm and seed, ``t1 train`` on the training side (in this process, `bench_learning_recipe.train`),
   a checkpoint every ``--eval-every`` PPO steps. Arms: ``ppo-critic`` (the recipe: critic warm-up, GAE
   advantages, T1 §4.5), ``grpo`` (group-relative advantages over each task's samples, no critic warm-up,
   T1 §9), ``shuffled`` (``ppo-critic`` with each batch's rewards permuted across its trials before the
   update: same compute, the reward no longer the trajectory's own; `bench_learning_recipe`'s control).
4. ``t1 eval`` of the held-out side (with the training's turn budget, ``rollout.max_turns``, unless an
   ``evaluation.max_turns=`` override says otherwise) at step 0 (the start weights, once per seed: every
   arm starts there) and at every checkpoint and the final weights: one JSON line per (arm, seed, step)
   appended to OUT/heldout.jsonl with the resolved share, the mean dense reward, pass@k, and per task the
   means over attempts (what `heldout_stats.summarize` needs for intervals).
5. The statistics (`heldout_stats.summarize`, every figure with its test) for the resolved share and the
   reward, printed, then one JSON line.

Nothing asserts. A smoke configuration (1 seed, 1 arm, 2 steps) proves the pipeline runs, not learning.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_learning_recipe import train  # noqa: E402 - the previous benchmark's run and its control
from heldout_stats import summarize  # noqa: E402

ARMS = {
    "ppo-critic": ([], False),
    "grpo": (["ppo.advantage.estimator=grpo", "critic_warmup.enabled=false"], False),
    "shuffled": ([], True),
}
"""Arm -> (its overrides of the recipe, whether the rewards are permuted before each update)."""


def ensure_split(out: Path, families: list[str], n_train: int, n_heldout: int, seed: int) -> dict[str, Path]:
    """The split's two pool directories under ``out``, written unless an identical split is already there.

    Raises:
        SystemExit: a split.json of other settings is there (remove the folder or choose another ``--out``).
    """
    from t1_tasks.synth import synth_split, write_split

    split = synth_split(families, n_train, n_heldout, seed=seed)
    manifest = out / "split.json"
    want = {"train": [list(k) for k in split.train], "heldout": [list(k) for k in split.heldout]}
    if manifest.is_file():
        have = json.loads(manifest.read_text())
        got = {side: [[r["family"], r["seed"]] for r in have.get(side, [])] for side in ("train", "heldout")}
        if got != want:
            raise SystemExit(
                f"{manifest}: a split of other settings is there; remove {out} or pick another --out"
            )
        return {"train": out / "train", "heldout": out / "heldout"}
    return write_split(split, out)


def sft_order(split_dir: Path) -> list[str]:
    """The training side's task ids in the order the split drew them (round-robin over the families).

    ``--sft-tasks K`` takes the first K of this order, so every family is in the SFT subset once K reaches
    the number of families (a sorted order would take K tasks of the first family).
    """
    return [r["task"] for r in json.loads((split_dir / "split.json").read_text())["train"]]


def sft(recipe: Path, overrides: list[str], train_dir: Path, tasks: list[str], output: Path) -> Path:
    """``t1 sft`` on the reference solutions of ``tasks`` (of ``train_dir``); the weights it wrote."""
    weights = output / "weights" / "actor.safetensors"
    if weights.is_file():
        return weights
    cmd = [
        *(sys.executable, "-m", "t1.cli", "sft", str(recipe), *overrides),
        f"pool.source={train_dir}",  # the SFT fits the recipe's pool when sft.pool is unset
        f"pool.tasks=[{','.join(tasks)}]",
        "sft.pool=null",
        f"sft.output={output}",
        "--overwrite",
        "--quiet",
    ]
    subprocess.run(cmd, check=True, cwd=ROOT)
    return weights


def evaluate(recipe: Path, overrides: list[str], heldout: Path, weights: Path | None) -> dict[str, Any]:
    """``t1 eval --json`` of the held-out pool with ``weights`` (None: the recipe's own start weights).

    Returns the overall figures and ``per_task``: task id -> means over its finished attempts of
    ``resolved`` (0 or 1 each) and ``reward``; a task with no finished attempt is left out (its
    infrastructure failures are in ``failed``).
    """
    cmd = [
        sys.executable,
        "-m",
        "t1.cli",
        "eval",
        str(heldout),
        "--recipe",
        str(recipe),
        "--json",
        *overrides,
    ]
    if weights is not None:
        cmd += ["--checkpoint", str(weights)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"t1 eval exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return {
        **eval_figures(json.loads(proc.stdout.strip().splitlines()[-1])),
        "eval_wall_s": time.perf_counter() - t0,
    }


def eval_figures(data: dict[str, Any]) -> dict[str, Any]:
    """The benchmark's figures from a ``t1 eval --json`` object (`evaluate` documents them)."""
    per_task: dict[str, dict[str, list[float]]] = {}
    for t in data["trial_rows"]:
        if t["status"] == "finished":
            slot = per_task.setdefault(t["task_id"], {"resolved": [], "reward": []})
            slot["resolved"].append(float(t["resolved"]))
            if t["reward"] is not None:
                slot["reward"].append(float(t["reward"]))
    return {
        "resolved": data["resolved_rate"],
        "reward": data["mean_reward"],
        "pass_at_k": data["pass_at_k"],
        "failed": data["failed"],
        "per_task": {
            k: {m: (sum(v) / len(v) if v else None) for m, v in d.items()}
            for k, d in sorted(per_task.items())
        },
    }


def checkpoints(run_dir: Path, steps: int) -> list[tuple[int, Path]]:
    """(PPO step, weights) of every checkpoint of ``run_dir`` and of its final weights (at ``steps``)."""
    out = []
    for ckpt in sorted((run_dir / "checkpoints").glob("step-*")):
        actor = ckpt / "weights" / "actor.safetensors"
        if actor.is_file():
            out.append((int(ckpt.name.removeprefix("step-")), actor))
    final = run_dir / "weights" / "actor.safetensors"
    if final.is_file() and all(s != steps for s, _ in out):
        out.append((steps, final))
    return out


def arm_overrides(
    recipe: Path, arm: str, common: list[str], train_dir: Path, steps: int, every: int
) -> list[str]:
    """The ``t1 train`` overrides of one arm.

    ``common``, then the arm's own, the training pool, the steps and a checkpoint every ``every`` steps (the
    weights the held-out evaluations load); GRPO's group is one task's samples (``ppo.samples_per_task``).

    Raises:
        KeyError: an unknown arm.
    """
    extra, _ = ARMS[arm]
    over = [
        *common,
        *extra,
        f"pool.source={train_dir}",
        f"ppo.steps={steps}",
        f"trainer.checkpoint_every={every}",
        "trainer.save_final_weights=true",
    ]
    if arm == "grpo":
        over.append(f"ppo.advantage.group_size={_samples_per_task(recipe, over)}")
    return over


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-heldout")
    ap.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "tiny-learn.yaml")
    ap.add_argument("--families", default="text,csv,files")
    ap.add_argument("--train", type=int, default=60, help="generated training tasks")
    ap.add_argument("--heldout", type=int, default=30, help="generated held-out tasks")
    ap.add_argument("--split-seed", type=int, default=0, help="first seed of the split's families")
    ap.add_argument("--arms", default="ppo-critic,grpo,shuffled", help=f"comma-separated: {', '.join(ARMS)}")
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated training seeds (the recipe's seed)")
    ap.add_argument("--steps", type=int, default=20, help="PPO steps per run (ppo.steps)")
    ap.add_argument("--eval-every", type=int, default=5, help="held-out evaluation every N PPO steps")
    ap.add_argument("--attempts", type=int, default=2, help="attempts per held-out task (pass@k up to it)")
    ap.add_argument("--sft-tasks", type=int, default=0, help="SFT on the first K training tasks (0: none)")
    ap.add_argument(
        "--split-only",
        action="store_true",
        help="write the split and exit (before starting one process per seed on the same --out)",
    )
    ap.add_argument("overrides", nargs="*", help="dotlist overrides for every phase")
    args = ap.parse_args(argv)
    args.arm_list = [a.strip() for a in args.arms.split(",") if a.strip()]
    if not args.arm_list or any(a not in ARMS for a in args.arm_list):
        ap.error(f"--arms {args.arms!r}: give a comma-separated subset of {', '.join(ARMS)}")
    args.seed_list = [int(s) for s in args.seeds.split(",") if s.strip()]
    if args.sft_tasks > args.train:
        ap.error(f"--sft-tasks {args.sft_tasks} > --train {args.train}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out: Path = args.out.resolve()
    dirs = ensure_split(out / "split", args.families.split(","), args.train, args.heldout, args.split_seed)
    if args.split_only:
        print(f"split: {dirs['train']} and {dirs['heldout']}", file=sys.stderr)
        return 0
    train_ids = sft_order(out / "split")
    rows_file = out / "heldout.jsonl"
    runs: dict[str, Any] = {}
    for seed in args.seed_list:
        common = [*args.overrides, f"seed={seed}", f"logging.run_root={out / 'runs'}", "pool.tasks=null"]
        if args.sft_tasks:
            start = sft(
                args.recipe, common, dirs["train"], train_ids[: args.sft_tasks], out / f"sft-seed{seed}"
            )
            common += ["model.init=checkpoint", f"model.checkpoint={start.parent.parent}"]
        else:
            start = None
            common += ["model.init=random", "model.checkpoint=null"]
        eval_over = [*common, f"evaluation.attempts={args.attempts}", *_eval_turns(args.recipe, common)]
        print(f"seed {seed}: held-out evaluation of the start weights", file=sys.stderr)
        first = evaluate(args.recipe, eval_over, dirs["heldout"], start)
        for arm in args.arm_list:
            train_over = arm_overrides(args.recipe, arm, common, dirs["train"], args.steps, args.eval_every)
            res = train(args.recipe, train_over, control=ARMS[arm][1])
            runs[f"{arm}/{seed}"] = {k: res[k] for k in ("run_dir", "reward", "resolved", "wall_s")}
            evals = [(0, first)] + [
                (step, evaluate(args.recipe, eval_over, dirs["heldout"], w))
                for step, w in checkpoints(Path(res["run_dir"]), args.steps)
            ]
            with rows_file.open("a") as fh:
                for step, figures in evals:
                    row = {"arm": arm, "seed": seed, "step": step, **figures, "run_dir": res["run_dir"]}
                    fh.write(json.dumps(row) + "\n")
                    print(
                        f"{arm:<10} seed {seed} step {step:>3}: held-out resolved {figures['resolved']}, "
                        f"reward {figures['reward']}, pass@k {figures['pass_at_k']}",
                        file=sys.stderr,
                    )
    rows = [json.loads(x) for x in rows_file.read_text().splitlines() if x.strip()]
    stats = {m: summarize(rows, metric=m) for m in ("resolved", "reward")}
    print(json.dumps({"bench": "heldout", "out": str(out), "runs": runs, "stats": stats}, default=str))
    return 0


def _eval_turns(recipe: Path, overrides: list[str]) -> list[str]:
    """``evaluation.max_turns`` = the training's ``rollout.max_turns`` unless an override sets it.

    The held-out episodes get the turn budget the policy was trained under (the spec's default is 60).
    """
    if any(o.startswith("evaluation.max_turns=") for o in overrides):
        return []
    from t1_spec import load_recipe

    return [f"evaluation.max_turns={load_recipe(recipe, overrides).rollout.max_turns}"]


def _samples_per_task(recipe: Path, overrides: list[str]) -> int:
    """The recipe's ``ppo.samples_per_task`` under ``overrides`` (GRPO's group is one task's samples)."""
    from t1_spec import load_recipe

    return load_recipe(
        recipe, [o for o in overrides if not o.startswith("ppo.advantage.")]
    ).ppo.samples_per_task


if __name__ == "__main__":
    sys.exit(main())
