"""Time one local-sandbox launch (``exec("true")``) and a sandbox's start + close, against a bare ``bwrap``.

The baseline, measured in the same run, is a bare ``bwrap --unshare-all --ro-bind /usr /usr ... true``: no
uid switch, limits, cgroup, seccomp filter or mounts of the sandbox. The T1 path is ``LocalSandbox.exec``
with everything the sandbox sets up per launch (the cgroup join in the child, the seccomp program on a pipe,
the bwrap command line), and ``start`` + ``close`` (the cgroup and the size-limited root created and
removed). Prints min/median/max of each and of the per-launch ratio, then one JSON line. No assertion on
time.

    uv run python tools/bench/bench_sandbox_launch.py [--runs 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from t1_sandbox.local import LocalSandbox, bwrap_path


def _bare_launch() -> float:
    argv = [bwrap_path(), "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr"]
    for link in ("bin", "lib", "lib64"):
        if os.path.islink(f"/{link}"):
            argv += ["--symlink", os.readlink(f"/{link}"), f"/{link}"]
    t0 = time.perf_counter()
    subprocess.run([*argv, "true"], check=True)
    return time.perf_counter() - t0


async def _t1(runs: int, env: Path) -> tuple[list[float], list[float]]:
    launches, lifecycles = [], []
    for _ in range(max(3, runs // 5)):
        t0 = time.perf_counter()
        async with LocalSandbox() as sb:
            await sb.start(env, timeout_s=30)
        lifecycles.append(time.perf_counter() - t0)
    async with LocalSandbox() as sb:
        await sb.start(env, timeout_s=30)
        await sb.exec("true", timeout_s=30)  # warm
        for _ in range(runs):
            t0 = time.perf_counter()
            r = await sb.exec("true", timeout_s=30)
            launches.append(time.perf_counter() - t0)
            assert r.ok, r.stderr
    return launches, lifecycles


def _stats(xs: list[float]) -> dict[str, float]:
    return {"min": min(xs), "median": statistics.median(xs), "max": max(xs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = Path(tmp)
        (env / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
        _bare_launch()
        bare = [_bare_launch() for _ in range(args.runs)]
        launches, lifecycles = asyncio.run(_t1(args.runs, env))
    ratio = [a / b for a, b in zip(sorted(launches), sorted(bare), strict=True)]
    out = {
        "bare_bwrap_s": _stats(bare),
        "t1_exec_s": _stats(launches),
        "t1_start_close_s": _stats(lifecycles),
        "exec_over_bare": _stats(ratio),
    }
    for name, s in out.items():
        print(f"{name:18s} min {s['min']:.4f}  median {s['median']:.4f}  max {s['max']:.4f}")
    print(json.dumps({"bench": "sandbox_launch", **out}))


if __name__ == "__main__":
    main()
