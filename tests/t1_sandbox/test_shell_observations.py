"""What the agent reads of a session of commands, written out: the shell's completion rule must not change it.

The session covers a quick command, long output, a continuation prompt (``PS2``), an interactive prompt that
waits for a typed answer, a command cut at its ``duration_s`` and interrupted with Ctrl-C, and a background
job with its completion notice. The expected texts are what a 160 x 40 terminal shows for these keystrokes
(bash's echo of the typed line, the output, ``$ `` / ``> ``), written here by hand; a background job's pid is
the only part read from the output.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from pathlib import Path

import pytest

from t1_sandbox.base import Sandbox

sys.path.insert(0, str(Path(__file__).parent))
from shell_backends import environment, make_sandbox  # noqa: E402

SEQ = "".join(f"{i}\n" for i in range(1, 3001))

#: (keystrokes, duration_s, what the agent reads); ``PID`` stands for the background job's pid.
SESSION = [
    ("echo hi\n", 10, "$ echo hi\nhi\n$ "),
    ("seq 1 3000\n", 10, "seq 1 3000\n" + SEQ + "$ "),
    ("echo 'open\n", 10, "echo 'open\n> "),
    ("close'\n", 10, "close'\nopen\nclose\n$ "),
    ('read -p "name? " who\n', 1, 'read -p "name? " who\nname? '),
    ("bob\n", 10, "bob\n$ "),
    ('echo "[$who]"\n', 10, 'echo "[$who]"\n[bob]\n$ '),
    ("sleep 30\n", 0.5, "sleep 30\n"),
    ("C-c", 10, "^C\n$ "),
    ("sleep 0.5 &\n", 10, "sleep 0.5 &\n[1] PID\n$ "),
    # bash reports the job's end when it reaps it, while the foreground ``sleep 1`` still runs
    ("sleep 1; echo after\n", 10, "sleep 1; echo after\n[1]+  Done                    sleep 0.5\nafter\n$ "),
    ("cd /tmp && pwd\n", 10, "cd /tmp && pwd\n/tmp\n$ "),
]


async def _session(sandbox: Sandbox, environment: Path) -> list[str]:
    async with sandbox:
        await sandbox.start(environment, timeout_s=60)
        shell = await sandbox.open_shell()
        seen = []
        for keys, duration_s, _ in SESSION:
            seen.append(await shell.send(keys, duration_s=duration_s, max_wait_s=duration_s + 20))
        return seen


@pytest.mark.parametrize("kind", ["local", pytest.param("docker", marks=pytest.mark.docker), "daytona"])
def test_a_session_reads_as_a_terminal_shows_it(kind, tmp_path, request):
    seen = asyncio.run(_session(make_sandbox(kind, request), environment(tmp_path)))
    seen = [re.sub(r"^\[1\] \d+$", "[1] PID", text, flags=re.MULTILINE) for text in seen]
    assert seen == [expected for _, _, expected in SESSION]


def test_a_command_cut_at_its_duration_returns_then_and_not_before(tmp_path, request):
    async def go(sandbox: Sandbox) -> float:
        async with sandbox:
            await sandbox.start(environment(tmp_path), timeout_s=60)
            shell = await sandbox.open_shell()
            begin = time.monotonic()
            await shell.send("sleep 30\n", duration_s=1.0, max_wait_s=10)
            return time.monotonic() - begin

    assert 1.0 <= asyncio.run(go(make_sandbox("local", request))) < 3.0
