"""Benchmark: start-up of the command line against the interpreter and import floors, measured in one run.

Run (from the repository root):

    uv run python tools/bench/bench_startup.py [--repeats 3] [--recipe recipes/tiny-cpu.yaml] [--no-train]
        [--bytecode env|cache] [--priority -10]

Each figure is the wall time of a fresh process, repeated ``--repeats`` times (min / median / max):

- ``validate``: ``t1 recipe validate RECIPE`` from start to exit (goal: under 1 s).
- ``first_trial``: ``t1 train RECIPE`` from start to the console line ``t1 train <name>: ...``, which the loop
  prints right before it launches the first step's trials (goal: under 10 s for the tiny recipe). The run
  then gets SIGTERM, so its trials are cancelled and its sandboxes reclaimed; its run directory goes to a
  temporary ``logging.run_root`` that is removed at the end.
- The floors, as baselines: ``python -c pass`` (the interpreter), ``import torch``, and ``import torch;
  import t1_policy.model`` (torch plus the transformers model code that the embedded run cannot start
  without). ``validate / pass`` and ``first_trial / model floor`` are the printed ratios, each taken within a
  repetition (`paired.paired_ratios`); the commands run interleaved, the order reversed every other
  repetition (`paired.interleave`).

``--bytecode env`` (default) runs the children in this environment as it is. Python caches compiled
bytecode next to the sources unless ``PYTHONDONTWRITEBYTECODE`` is set or ``__pycache__`` is not writable;
without a cache every start compiles torch's and transformers' sources again. ``--bytecode cache`` gives the
children a private cache folder (``PYTHONPYCACHEPREFIX``), warmed by one untimed run of each command, which
is what a default installation has after its first start. The JSON says which was measured and whether the
installed packages carry compiled bytecode.

``--priority N`` writes N into ``/proc/self/autogroup`` first (needs root; -10 matches the other jobs of a
loaded box), so the children share the CPU as those jobs do. Nothing asserts on time; the last line is one
JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from paired import format_summary, interleave, paired_ratios, summary  # tools/bench/paired.py

ROOT = Path(__file__).resolve().parents[2]
MARKER = "t1 train "
"""The console line that `t1.run.driver.Run` prints right before the first step's trials are launched."""

FLOORS = {
    "python": "pass",
    "import_torch": "import torch",
    "import_model": "import torch; import t1_policy.model",
}
"""Baseline name -> the ``python -c`` code whose start-to-exit wall time it is."""


def timed_run(cmd: list[str], env: dict[str, str], timeout_s: float) -> float:
    """Wall seconds of ``cmd`` from spawn to exit.

    Raises:
        RuntimeError: the command exited non-zero (its stderr's tail is in the message).
    """
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {done.returncode}: {done.stderr[-600:]}")
    return wall


def first_trial_seconds(cmd: list[str], env: dict[str, str], timeout_s: float) -> float:
    """Seconds from spawning ``t1 train`` until it prints `MARKER`; the run is then stopped with SIGTERM.

    Raises:
        RuntimeError: the process ended, or ``timeout_s`` passed, before the marker line.
    """
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    seen: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(MARKER):
                return time.perf_counter() - t0
            seen.append(line)
            if time.perf_counter() - t0 > timeout_s:
                break
        raise RuntimeError(f"{' '.join(cmd)}: no {MARKER!r} line; output tail: {''.join(seen[-15:])}")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # the run cancels its trials and reclaims their sandboxes
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def spread(values: list[float]) -> dict[str, float]:
    """``min`` / ``median`` / ``max`` of ``values``, seconds, rounded to milliseconds."""
    return {
        "min": round(min(values), 3),
        "median": round(statistics.median(values), 3),
        "max": round(max(values), 3),
    }


def installed_bytecode() -> bool:
    """Whether the installed torch package carries compiled bytecode next to its sources."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    return (
        spec is not None and spec.origin is not None and (Path(spec.origin).parent / "__pycache__").is_dir()
    )


def child_env(mode: str, cache_dir: Path) -> dict[str, str]:
    """The children's environment: this one (``env``), or with a private bytecode cache (``cache``)."""
    env = dict(os.environ)
    if mode == "cache":
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(cache_dir)
    return env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--recipe", default="recipes/tiny-cpu.yaml")
    ap.add_argument("--no-train", action="store_true", help="skip the t1 train measurement")
    ap.add_argument("--bytecode", choices=("env", "cache"), default="env")
    ap.add_argument("--priority", type=int, default=None, help="autogroup nice value for this process")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds allowed for one start")
    args = ap.parse_args()

    if args.priority is not None:
        Path("/proc/self/autogroup").write_text(str(args.priority))
    work = Path(tempfile.mkdtemp(prefix="t1-bench-startup-"))
    env = child_env(args.bytecode, work / "pycache")
    py = sys.executable
    t1 = [py, "-m", "t1.cli"]
    validate = [*t1, "recipe", "validate", args.recipe]
    train = [*t1, "train", args.recipe, f"logging.run_root={work / 'runs'}", "logging.print_table=false"]
    floors = {name: [py, "-c", code] for name, code in FLOORS.items()}
    try:
        if args.bytecode == "cache":  # one untimed start of each fills the cache
            for cmd in (*floors.values(), validate):
                timed_run(cmd, env, args.timeout)
            if not args.no_train:
                first_trial_seconds(train, env, args.timeout)
        arms = {name: (lambda cmd=cmd: timed_run(cmd, env, args.timeout)) for name, cmd in floors.items()}
        arms["validate"] = lambda: timed_run(validate, env, args.timeout)
        if not args.no_train:
            arms["first_trial"] = lambda: first_trial_seconds(train, env, args.timeout)
        # interleaved, order reversed every other repetition, so a change in load hits every figure alike
        times = interleave(arms, repeat=args.repeats)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    figures = {name: spread(v) for name, v in times.items() if v}
    paired = {"validate_over_python": paired_ratios(times["validate"], times["python"])}
    if "first_trial" in times:
        paired["first_trial_over_import_model"] = paired_ratios(times["first_trial"], times["import_model"])
    ratios = {name: {k: round(v, 2) for k, v in summary(r).items()} for name, r in paired.items()}
    print(
        f"recipe {args.recipe}, {args.repeats} repeats, bytecode {args.bytecode}, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    for name, f in figures.items():
        print(f"  {name:<14} min {f['min']:7.2f} s   median {f['median']:7.2f} s   max {f['max']:7.2f} s")
    for name, r in paired.items():
        print("  " + format_summary(f"{name} (paired)", r))
    print(
        json.dumps(
            {
                "bench": "startup",
                "recipe": args.recipe,
                "repeats": args.repeats,
                "bytecode": args.bytecode,
                "installed_bytecode": installed_bytecode(),
                "pythondontwritebytecode": bool(os.environ.get("PYTHONDONTWRITEBYTECODE")),
                "load_avg_1m": round(os.getloadavg()[0], 2),
                "seconds": figures,
                "ratios": ratios,
                "goals_s": {"validate": 1.0, "first_trial": 10.0},
            }
        )
    )


if __name__ == "__main__":
    main()
