"""Time a local-sandbox launch (``exec("true")``) and start + exec + close, against a bare ``bwrap``.

The baseline, measured in the same run, is a bare ``bwrap --unshare-all --ro-bind /usr /usr ... true``: no
uid switch, limits, cgroup, seccomp filter or mounts of the sandbox. The T1 arms are ``LocalSandbox.exec``
on a started sandbox, with everything the sandbox sets up per launch (the cgroup join in the child, the
seccomp program on a pipe, the bwrap command line), and a whole lifecycle: ``start`` + ``exec("true")`` +
``close`` (the cgroup and the size-limited root created and removed). The three arms run interleaved, one
of each per repetition (`paired.interleave`: A B C, then C B A, ...), and each ratio is taken within its
repetition, in measurement order. Prints min/median/max of each arm and of the paired ratios (goal for the
lifecycle: <= 2x bare), then one JSON line. No assertion on time.

    uv run python tools/bench/bench_sandbox_launch.py [--runs 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from paired import interleave, paired_ratios, summary  # tools/bench/paired.py

from t1_sandbox.local import LocalSandbox, bwrap_path


def _bare_launch() -> float:
    argv = [bwrap_path(), "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr"]
    for link in ("bin", "lib", "lib64"):
        if os.path.islink(f"/{link}"):
            argv += ["--symlink", os.readlink(f"/{link}"), f"/{link}"]
    t0 = time.perf_counter()
    subprocess.run([*argv, "true"], check=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30, help="repetitions, one of each arm")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    print(f"load average at start: {load:.1f} ({os.cpu_count()} CPUs)")
    loop = asyncio.new_event_loop()
    with tempfile.TemporaryDirectory() as tmp:
        env = Path(tmp)
        (env / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
        warm = LocalSandbox()
        loop.run_until_complete(warm.start(env, timeout_s=30))

        async def exec_true() -> float:
            t0 = time.perf_counter()
            r = await warm.exec("true", timeout_s=30)
            elapsed = time.perf_counter() - t0
            assert r.ok, r.stderr
            return elapsed

        async def lifecycle() -> float:
            t0 = time.perf_counter()
            async with LocalSandbox() as sb:
                await sb.start(env, timeout_s=30)
                r = await sb.exec("true", timeout_s=30)
            elapsed = time.perf_counter() - t0
            assert r.ok, r.stderr
            return elapsed

        arms = {
            "bare_bwrap_s": _bare_launch,
            "t1_exec_s": lambda: loop.run_until_complete(exec_true()),
            "t1_start_exec_close_s": lambda: loop.run_until_complete(lifecycle()),
        }
        for arm in arms.values():  # warm every path once, unmeasured
            arm()
        times = interleave(arms, repeat=args.runs)
        loop.run_until_complete(warm.close())
    loop.close()
    out = {name: summary(values) for name, values in times.items()}
    out["exec_over_bare"] = summary(paired_ratios(times["t1_exec_s"], times["bare_bwrap_s"]))
    out["start_exec_close_over_bare"] = summary(
        paired_ratios(times["t1_start_exec_close_s"], times["bare_bwrap_s"])
    )
    for name, s in out.items():
        print(f"{name:26s} min {s['min']:.4f}  median {s['median']:.4f}  max {s['max']:.4f}")
    print("goal: start_exec_close_over_bare <= 2 (median)")
    print(json.dumps({"bench": "sandbox_launch", "runs": args.runs, "load_average": load, **out}))


if __name__ == "__main__":
    main()
