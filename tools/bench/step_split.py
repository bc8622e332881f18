"""Where a PPO step's wall time goes: generation, training, and the rest (sandbox, verifier, harness).

Run (from the repository root):

    OMP_NUM_THREADS=1 uv run python tools/bench/step_split.py [recipe] [overrides ...]

Trains the recipe (default ``recipes/tiny-cpu.yaml``) in this process, as ``t1 train`` does, with two
probes added: the engine's ``generate`` records when each request was in flight, and the local sandbox's
launch (``Launcher._spawn``) records how long each launch held its caller, and every call of a trial into its
local sandbox (start, exec, the verifier's exec, upload, download, the shell's commands, close) its time,
summed over trials beside the trials' summed time waiting on ``generate``. Per PPO step, from the run's own
rows: the step's wall time (``wall_s.step``), training (``wall_s.train``), generation (the union of the
intervals with at least one request in flight, so concurrent trials count once) and the rest: the step
minus the two, i.e. the time the engine sat idle during the rollout (sandbox start, commands, verifier,
harness) plus publication. Also the trials' own ``timings_s`` (their records), summed: total, generate,
verifier, sandbox start and the rest. Prints the shares, the run directory (for ``tools/compare_runs.py``) and
one JSON line; ``--report RUN_DIR`` prints only the trials' split of an existing run. Nothing asserts on time.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from pathlib import Path
from typing import Any

from t1.run.driver import Run
from t1_rollout.engine.embedded import EmbeddedEngine
from t1_sandbox.local import LocalSandbox, LocalShell
from t1_sandbox.local.process import Launcher
from t1_spec import load_recipe

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "tiny-cpu.yaml"
GENERATIONS: list[tuple[float, float]] = []  # (start, end), time.monotonic()
LAUNCHES: list[float] = []  # seconds each launch took before its caller got the process back
SANDBOX: list[
    float
] = []  # seconds of each call of a trial into its sandbox (start, exec, verifier, shell, ...)
SANDBOX_CALLS = ("start", "exec", "exec_verifier", "upload", "download", "open_shell", "stop_agent", "close")


def _probe_generate(fn: Any) -> Any:
    @functools.wraps(fn)
    async def wrapped(*args: Any, **kwargs: Any) -> Any:
        t0 = time.monotonic()
        try:
            return await fn(*args, **kwargs)
        finally:
            GENERATIONS.append((t0, time.monotonic()))

    return wrapped


def _probe(fn: Any, into: list[float]) -> Any:
    @functools.wraps(fn)
    async def wrapped(*args: Any, **kwargs: Any) -> Any:
        t0 = time.monotonic()
        try:
            return await fn(*args, **kwargs)
        finally:
            into.append(time.monotonic() - t0)

    return wrapped


def union_s(intervals: list[tuple[float, float]]) -> float:
    """Seconds covered by at least one of ``intervals`` (overlaps counted once)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def trial_split(run_dir: Path) -> dict[str, float]:
    """Seconds summed over the run's recorded trials (``timings_s``): total, generate, verifier, the rest."""
    sums = {"total": 0.0, "generate": 0.0, "verifier": 0.0, "sandbox_start": 0.0}
    for path in sorted((run_dir / "trajectories").glob("step-*/*.json")):
        timings = json.loads(path.read_text()).get("timings_s", {})
        for key in sums:
            sums[key] += float(timings.get(key) or 0.0)
    sums["rest"] = sums["total"] - sums["generate"] - sums["verifier"] - sums["sandbox_start"]
    return sums


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--report"]:  # the trajectory split of an existing run directory only
        t = trial_split(Path(args[1]))
        print(json.dumps({"bench": "step_split_trials", "run_dir": args[1], **t}))
        return
    recipe_path = Path(args.pop(0)) if args and not args[0].count("=") else RECIPE
    EmbeddedEngine.generate = _probe_generate(EmbeddedEngine.generate)  # type: ignore[method-assign]
    Launcher._spawn = _probe(Launcher._spawn, LAUNCHES)  # type: ignore[method-assign]
    for name in SANDBOX_CALLS:
        setattr(LocalSandbox, name, _probe(getattr(LocalSandbox, name), SANDBOX))
    LocalShell.send = _probe(LocalShell.send, SANDBOX)  # type: ignore[method-assign]
    recipe = load_recipe(recipe_path, args)
    summary = Run(recipe, recipe.model_dump(mode="json", by_alias=True)).run()
    rows = [json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text().splitlines()]
    ppo = [r for r in rows if r.get("phase") == "ppo"]
    step = sum(r["wall_s"]["step"] for r in ppo)
    train = sum(r["wall_s"]["train"] for r in ppo)
    gen = union_s(GENERATIONS)
    rest = step - train - gen
    out = {
        "bench": "step_split",
        "recipe": str(recipe_path),
        "run_dir": str(summary.run_dir),
        "steps": len(ppo),
        "step_s": step,
        "generation_s": gen,
        "training_s": train,
        "rest_s": rest,
        "generation_share": gen / step,
        "training_share": train / step,
        "rest_share": rest / step,
        "launches": len(LAUNCHES),
        "launch_s_total": sum(LAUNCHES),
        "trial_generate_s": sum(b - a for a, b in GENERATIONS),
        "trial_sandbox_s": sum(SANDBOX),
        "trials_s": trial_split(summary.run_dir),
    }
    print(f"run directory: {summary.run_dir}")
    print(
        f"step {step:.1f} s over {len(ppo)} steps: generation {gen:.1f} s ({gen / step:.0%}), training "
        f"{train:.1f} s ({train / step:.0%}), sandbox+verifier+harness {rest:.1f} s ({rest / step:.0%}); "
        f"{len(LAUNCHES)} sandbox launches held their callers {sum(LAUNCHES):.1f} s in all"
    )
    print(
        f"summed over trials: waiting on generate {out['trial_generate_s']:.1f} s, in sandbox calls "
        f"{out['trial_sandbox_s']:.1f} s (start, exec, verifier, shell commands, close)"
    )
    t = out["trials_s"]
    print(
        f"trials' own timings, summed: total {t['total']:.1f} s, generate {t['generate']:.1f} s "
        f"({t['generate'] / t['total']:.0%}), verifier {t['verifier']:.1f} s "
        f"({t['verifier'] / t['total']:.0%}), "
        f"sandbox start {t['sandbox_start']:.1f} s, the rest {t['rest']:.1f} s ({t['rest'] / t['total']:.0%})"
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
