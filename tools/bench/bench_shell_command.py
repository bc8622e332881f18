"""Time one shell command (``true``) through T1's local shell against bash on a pty driven by a minimal loop.

A (the baseline, what a capable user would write): ``bash --noprofile --norc --noediting -i`` on a pseudo-
terminal with a distinctive ``PS1``; one command is ``write("true\\n")`` then reading the master until the
prompt comes back. B: ``LocalShell.send("true\\n")`` of a started ``LocalSandbox`` (bash under bubblewrap,
what a trial's agent types into). Both shells are started once; then A and B alternate (ABAB ...), each
round timing one command of each, so that both see the same machine load. Prints min / median / max of A, B
and of the paired ratio B / A, then one JSON line. No assertion on time.

    uv run python tools/bench/bench_shell_command.py [--rounds 200] [--command true]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pty
import select
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from t1_sandbox.local import LocalSandbox

_PROMPT = b"<bench-prompt>$ "


class PtyBash:
    """A: bash on a pty, one command = write the line, read until the prompt returns."""

    def __init__(self) -> None:
        self.master, slave = pty.openpty()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PS1": _PROMPT.decode(), "TERM": "dumb"}
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc", "--noediting", "-i"],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            start_new_session=True,
        )
        os.close(slave)
        self._read_to_prompt()

    def _read_to_prompt(self) -> bytes:
        seen = b""
        while not seen.endswith(_PROMPT):
            select.select([self.master], [], [], 10)
            seen += os.read(self.master, 65536)
        return seen

    def run(self, command: str) -> float:
        t0 = time.perf_counter()
        os.write(self.master, command.encode() + b"\n")
        self._read_to_prompt()
        return time.perf_counter() - t0

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        os.close(self.master)


def _stats(xs: list[float]) -> dict[str, float]:
    return {"min": min(xs), "median": statistics.median(xs), "max": max(xs)}


async def _measure(rounds: int, command: str, env: Path) -> tuple[list[float], list[float]]:
    a_times, b_times = [], []
    bare = PtyBash()
    try:
        async with LocalSandbox() as sb:
            await sb.start(env, timeout_s=30)
            shell = await sb.open_shell()
            for _ in range(3):  # warm both
                bare.run(command)
                await shell.send(command + "\n", duration_s=10, max_wait_s=10)
            for _ in range(rounds):
                a_times.append(bare.run(command))
                t0 = time.perf_counter()
                out = await shell.send(command + "\n", duration_s=10, max_wait_s=10)
                b_times.append(time.perf_counter() - t0)
                assert out.endswith("$ "), repr(out)
    finally:
        bare.close()
    return a_times, b_times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--command", default="true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = Path(tmp)
        (env / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
        a, b = asyncio.run(_measure(args.rounds, args.command, env))
    ratio = [y / x for x, y in zip(a, b, strict=True)]
    out = {"pty_bash_s": _stats(a), "t1_local_shell_s": _stats(b), "t1_over_pty_bash": _stats(ratio)}
    for name, s in out.items():
        print(f"{name:17s} min {s['min']:.6f}  median {s['median']:.6f}  max {s['max']:.6f}")
    print(json.dumps({"bench": "shell_command", "command": args.command, "rounds": args.rounds, **out}))


if __name__ == "__main__":
    main()
