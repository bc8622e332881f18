"""Time a local-sandbox launch (``exec("true")``) and start + exec + close, against a bare ``bwrap``.

The benchmark's own process first holds ``--hold-gb`` GiB of touched memory (default 2), as the trainer
holding a model does: a launch that forks the calling process pays for its size, one made by the small launch
server (``t1_sandbox.local.spawner``) does not.

The baseline, measured in the same run, is a bare ``bwrap --unshare-all --ro-bind /usr /usr ... true``: no
uid switch, limits, cgroup, seccomp filter or mounts of the sandbox. The T1 arms are ``LocalSandbox.exec``
on a started sandbox, with everything the sandbox sets up per launch (the cgroup join in the child, the
seccomp program on a pipe, the bwrap command line), and a whole lifecycle: ``start`` + ``exec("true")`` +
``close`` (the cgroup and the size-limited root created and removed). The three arms run interleaved, one
of each per repetition (`paired.interleave`: A B C, then C B A, ...), and each ratio is taken within its
repetition, in measurement order. Also measured during the T1 arms: the longest the event loop went without
running (a 1 ms ticker's largest gap, ``loop_stall_s``, per repetition). Prints min/median/max of each arm and
of the paired ratios (goal for the lifecycle: <= 2x bare), then one JSON line. No assertion on time.

    uv run python tools/bench/bench_sandbox_launch.py [--runs 30] [--hold-gb 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from paired import interleave, paired_ratios, summary  # tools/bench/paired.py

from t1_sandbox.local import LocalSandbox, bwrap_path


def bare_launch() -> float:
    """One bare ``bwrap --unshare-all ... true`` (the baseline a capable user would run), seconds."""
    argv = [bwrap_path(), "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr"]
    for link in ("bin", "lib", "lib64"):
        if os.path.islink(f"/{link}"):
            argv += ["--symlink", os.readlink(f"/{link}"), f"/{link}"]
    t0 = time.perf_counter()
    subprocess.run([*argv, "true"], check=True)
    return time.perf_counter() - t0


def _hold(gib: float) -> bytearray:
    """``gib`` GiB of memory written page by page, so that it is resident (the trainer's model)."""
    held = bytearray(int(gib * 1024**3))
    held[::4096] = b"\1" * len(range(0, len(held), 4096))
    return held


async def _stall_while(work: asyncio.Future[float]) -> float:
    """The largest gap, in seconds, between ticks of a 1 ms ticker while ``work`` runs."""
    largest, last = 0.0, time.perf_counter()
    while not work.done():
        await asyncio.sleep(0.001)
        now = time.perf_counter()
        largest, last = max(largest, now - last), now
    return largest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30, help="repetitions, one of each arm")
    ap.add_argument("--hold-gb", type=float, default=2.0, help="GiB this process holds, as a trainer does")
    args = ap.parse_args()
    held = _hold(args.hold_gb)
    with open("/proc/self/status") as fh:
        rss_gib = next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:")) / 1024**2
    print(f"holding {rss_gib:.2f} GiB resident")
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

        stalls: list[float] = []

        async def watched(arm: Callable[[], Awaitable[float]]) -> float:
            work = asyncio.ensure_future(arm())
            stalls.append(await _stall_while(work))
            return await work

        arms = {
            "bare_bwrap_s": bare_launch,
            "t1_exec_s": lambda: loop.run_until_complete(watched(exec_true)),
            "t1_start_exec_close_s": lambda: loop.run_until_complete(watched(lifecycle)),
        }
        for arm in arms.values():  # warm every path once, unmeasured
            arm()
        stalls.clear()
        times = interleave(arms, repeat=args.runs)
        loop.run_until_complete(warm.close())
    loop.close()
    del held
    out = {name: summary(values) for name, values in times.items()}
    out["loop_stall_s"] = summary(stalls)
    out["exec_over_bare"] = summary(paired_ratios(times["t1_exec_s"], times["bare_bwrap_s"]))
    out["start_exec_close_over_bare"] = summary(
        paired_ratios(times["t1_start_exec_close_s"], times["bare_bwrap_s"])
    )
    for name, s in out.items():
        print(f"{name:26s} min {s['min']:.4f}  median {s['median']:.4f}  max {s['max']:.4f}")
    print("goal: start_exec_close_over_bare <= 2 (median)")
    print(
        json.dumps(
            {
                "bench": "sandbox_launch",
                "runs": args.runs,
                "hold_gib": round(rss_gib, 2),
                "load_average": load,
                **out,
            }
        )
    )


if __name__ == "__main__":
    main()
