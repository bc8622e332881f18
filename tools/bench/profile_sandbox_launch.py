"""Where one local-sandbox start + exec + close spends its time, phase by phase (the launch benchmark's arm).

Runs ``bench_sandbox_launch.py``'s lifecycle arm (``LocalSandbox()``, ``start`` on a one-line Dockerfile,
``exec("true")``, ``close``) ``--runs`` times and wraps the functions it calls with wall-clock timers (the
real code path, nothing replaced): the uid slot, the tmpfs, the cgroup, the bwrap command line, the seccomp
program, the launch server's round trip up to the child's exec, the launch from exec to exit (bwrap's own
set-up plus ``true``), and the reclaim's parts. Nested phases are indented; a parent's time includes its
children's. Also times a bare ``bwrap`` (the benchmark's baseline) and the sandbox's own bwrap command line
run directly as root, so bwrap's share (its mounts) is separated from the launch path's. Prints the median
milliseconds of each phase, then one JSON line. No assertion on time.

    uv run python tools/bench/profile_sandbox_launch.py [--runs 30]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import inspect
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from bench_sandbox_launch import bare_launch  # tools/bench: the benchmark's own baseline

from t1_sandbox.local import cgroups, process, reclaim, sandbox, spawner, uids
from t1_sandbox.local.seccomp import seccomp_program

SAMPLES: dict[str, list[float]] = defaultdict(list)
_DEPTH = [0]
ORDER: list[tuple[int, str]] = []


def _timed(name: str, fn):  # noqa: ANN001, ANN202 - wraps any callable
    def record(elapsed: float, depth: int) -> None:
        SAMPLES[name].append(elapsed)
        if (depth, name) not in ORDER:
            ORDER.append((depth, name))

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def awrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            t0 = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                record(time.perf_counter() - t0, 0)

        return awrapper

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        _DEPTH[0] += 1
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _DEPTH[0] -= 1
            record(time.perf_counter() - t0, _DEPTH[0])

    return wrapper


def _patch(owner: object, attr: str, name: str) -> None:
    if hasattr(owner, attr):  # phases differ between versions of the sandbox: time those that exist
        setattr(owner, attr, _timed(name, getattr(owner, attr)))


def _instrument() -> None:
    L = sandbox.LocalSandbox  # noqa: N806
    _patch(sandbox, "parse_dockerfile", "start: parse Dockerfile")
    _patch(sandbox, "sweep_stale", "start: sweep_stale (+ watchdog arm)")
    _patch(L, "_prepare", "start: _prepare (thread)")
    _patch(sandbox, "acquire_uid_slot", "uid slot: acquire (lock + /proc scan)")
    _patch(L, "_apply_limits", "limits: tmpfs + cgroup")
    _patch(process, "mounted_roots", "limits: read /proc/self/mounts")
    _patch(process, "mount_root", "limits: mount tmpfs")
    _patch(cgroups.SandboxCgroup, "__init__", "cgroup: create + limit")
    _patch(L, "_add_mount", "start: add writable dir")
    _patch(L, "_build", "start: build (Dockerfile steps)")
    _patch(L, "_argv", "exec: bwrap argv (+ bundle masks)")
    _patch(process, "seccomp_program", "exec: seccomp program")
    _patch(spawner.Spawner, "spawn", "exec: launch server round trip (to exec)")
    _patch(process.Launcher, "_spawn", "exec: _spawn (pipes + round trip + attach)")
    _patch(process.Launcher, "_run", "exec: _run (spawn to exit + output)")
    _patch(L, "_stop_processes", "close: stop processes")
    _patch(L, "_reclaim", "close: _reclaim (thread)")
    _patch(reclaim, "kill_uid", "reclaim: kill_uid (/proc scans)")
    _patch(L, "_release_limits", "reclaim: release tmpfs + cgroup")
    _patch(L, "_release_cgroup", "reclaim: remove cgroup")
    _patch(reclaim, "release_root", "reclaim: unmount tmpfs")
    _patch(reclaim, "recycle_uid_slot", "uid slot: recycle")
    _patch(cgroups.SandboxCgroup, "remove", "cgroup: remove")
    _patch(reclaim.hostfs, "remove_tree", "reclaim: remove dir tree")
    _patch(uids.UidSlot, "release", "uid slot: release")


def _t1_argv_direct(env_dir: Path, keep: Path) -> list[str]:
    """The bwrap command line of an exec in a started sandbox (as the sandbox builds it), to run as root."""
    sb = sandbox.LocalSandbox()
    asyncio.run(sb.start(env_dir, timeout_s=30))
    argv = sb._argv(["true"], cwd="/app", env=sb._merged_env(None))
    asyncio.run(sb.close())
    # the sandbox's directories are gone after close: bind a stand-in tree of the same shape
    out, it = [], iter(argv)
    for arg in it:
        out.append(arg)
        if arg == "--bind":
            next(it)  # the sandbox's own directory, gone
            inner = next(it)
            stand_in = keep / inner.lstrip("/")
            stand_in.mkdir(parents=True, exist_ok=True)
            stand_in.chmod(0o755)
            out += [str(stand_in), inner]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    _instrument()
    with tempfile.TemporaryDirectory() as tmp:
        env = Path(tmp)
        (env / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")

        async def lifecycle() -> float:
            t0 = time.perf_counter()
            async with sandbox.LocalSandbox() as sb:
                t1 = time.perf_counter()
                await sb.start(env, timeout_s=30)
                t2 = time.perf_counter()
                await sb.exec("true", timeout_s=30)
                t3 = time.perf_counter()
            t4 = time.perf_counter()
            SAMPLES["= start"].append(t2 - t1)
            SAMPLES["= exec"].append(t3 - t2)
            SAMPLES["= close"].append(t4 - t3)
            return t4 - t0

        loop = asyncio.new_event_loop()
        loop.run_until_complete(lifecycle())  # warm
        SAMPLES.clear()
        ORDER.clear()
        total = [loop.run_until_complete(lifecycle()) for _ in range(args.runs)]
        loop.close()
        bare = [bare_launch() for _ in range(args.runs)]
        (env / "stand-in").mkdir(mode=0o755)
        fd_argv = _t1_argv_direct(env, env / "stand-in")
        direct = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            subprocess.run(fd_argv, check=True)
            direct.append(time.perf_counter() - t0)
        seccomp = []
        for _ in range(args.runs):
            program = seccomp_program()
            r, w = os.pipe()
            os.write(w, program)
            os.close(w)
            t0 = time.perf_counter()
            subprocess.run([fd_argv[0], "--seccomp", str(r), *fd_argv[1:]], check=True, pass_fds=(r,))
            seccomp.append(time.perf_counter() - t0)
            os.close(r)

    def ms(values: list[float]) -> float:
        return round(1000 * statistics.median(values), 3)

    print(f"{'phase':58s} median ms  (calls per lifecycle)")
    print(f"{'lifecycle (start + exec + close)':58s} {ms(total):8.3f}")
    for name in ("= start", "= exec", "= close"):
        print(f"  {name:56s} {ms(SAMPLES[name]):8.3f}")
    for depth, name in ORDER:
        calls = len(SAMPLES[name]) / args.runs
        print(f"    {'  ' * depth}{name:{54 - 2 * depth}s} {ms(SAMPLES[name]):8.3f}  ({calls:g})")
    print(f"{'bare bwrap (the benchmark baseline)':58s} {ms(bare):8.3f}")
    print(f"{'T1 bwrap argv run directly as root, no seccomp':58s} {ms(direct):8.3f}")
    print(f"{'T1 bwrap argv run directly as root, with seccomp':58s} {ms(seccomp):8.3f}")
    out = {name: ms(values) for name, values in SAMPLES.items()}
    out |= {"lifecycle": ms(total), "bare_bwrap": ms(bare), "t1_argv_direct": ms(direct)}
    out["t1_argv_direct_seccomp"] = ms(seccomp)
    print(json.dumps({"bench": "profile_sandbox_launch", "runs": args.runs, "median_ms": out}))


if __name__ == "__main__":
    main()
