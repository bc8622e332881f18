"""A command must not end its own wait early by printing the shell's prompt marker (a false completion).

A send returns the moment bash's prompt comes back; the prompt carries a marker with the shell's nonce, and
that nonce is readable by the agent (``$PS1``, ``/proc/$$/environ``). The attacks print the exact marker of
an idle prompt, then keep running: in a child (``sleep``), or in bash itself, blocked in its ``read`` builtin
on the terminal as at a prompt (alone, in ``eval``, a function, ``source``, a trap, ``PROMPT_COMMAND``). On
the local shell, and on Docker when the daemon runs on this host, the kernel's view of bash refuses the false
prompt (bash is not waiting on the terminal, or waits there from another place than its top-level parser:
its stack differs), so the send waits its ``duration_s`` as for any running command. Daytona (and a Docker
daemon on another host) gives no such view; the same attacks end the wait early there, as they did under the
polling rule (the marker plus 60 ms of quiet): those runs are expected failures, kept so that a fix shows.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from shell_backends import environment, make_sandbox  # noqa: E402

#: Each prints the marker of a prompt with no job (``ESC ] 9 ; t1-NONCE ; 0 BEL``), then runs 3 s more.
ATTACKS = {
    # the nonce from bash's own prompt variable, printed by a builtin
    "from_ps1": (
        "n=${PS1#*t1-}; n=${n%%;*}; printf '\\033]9;t1-%s;0\\007' \"$n\"; sleep 3; echo E$((1+1))ND\n"
    ),
    # the nonce from bash's environment under /proc, printed by a child process
    "from_proc": (
        "n=$(tr '\\0' '\\n' < /proc/$$/environ | sed -n 's/^PS1=.*t1-\\([0-9a-f]*\\);.*/\\1/p');"
        " printf '\\033]9;t1-%s;0\\007' \"$n\"; sleep 3; echo E$((1+1))ND\n"
    ),
    # the marker sent from a background writer while bash itself sits in a builtin wait
    "from_a_job": (
        "n=${PS1#*t1-}; n=${n%%;*}; (sleep 0.2; printf '\\033]9;t1-%s;0\\007' \"$n\") & wait; sleep 3;"
        " echo E$((1+1))ND\n"
    ),
}

#: The marker of a prompt with no job, printed by bash's ``printf`` builtin (double quotes: fits in '...').
_FORGE = 'n=${PS1#*t1-}; n=${n%%;*}; printf "\\033]9;t1-%s;0\\007" "$n";'
#: Each prints that marker, then bash itself blocks reading the terminal in its ``read`` builtin; the next
#: keystrokes are read's answer, then the command goes on (``E2ND`` names the answer).
READ_ATTACKS = {
    "builtin_read": f"{_FORGE} read x; echo E$((1+1))ND got=$x\n",
    "builtin_read_then_sleep": f"{_FORGE} read x; sleep 3; echo E$((1+1))ND got=$x\n",
    "read_in_eval": f"{_FORGE} eval 'read x'; echo E$((1+1))ND got=$x\n",
    "read_in_function": f"f() {{ read x; }}; {_FORGE} f; echo E$((1+1))ND got=$x\n",
    "read_in_source": f"echo 'read x' > /tmp/r.sh; {_FORGE} . /tmp/r.sh; echo E$((1+1))ND got=$x\n",
    "read_in_trap": f"trap 'trap - USR1; {_FORGE} read x; echo E$((1+1))ND got=$x' USR1; kill -USR1 $$\n",
    "read_in_prompt_command": f"PROMPT_COMMAND='PROMPT_COMMAND=; {_FORGE} read x; echo E$((1+1))ND got=$x'\n",
}

_NO_VIEW = "the host has no view of bash's process on this backend: a printed marker ends the wait early"


@pytest.mark.parametrize("attack", sorted(ATTACKS))
@pytest.mark.parametrize(
    "kind",
    [
        "local",
        pytest.param("docker", marks=pytest.mark.docker),
        pytest.param("daytona", marks=pytest.mark.xfail(reason=_NO_VIEW, strict=True)),
    ],
)
def test_a_printed_prompt_marker_does_not_end_a_running_command(kind, attack, tmp_path, request):
    async def go() -> tuple[float, str, str]:
        async with make_sandbox(kind, request) as sandbox:
            await sandbox.start(environment(tmp_path), timeout_s=60)
            shell = await sandbox.open_shell()
            if kind == "docker" and shell.view is None:  # a daemon on another host: no view of bash
                pytest.xfail(_NO_VIEW)
            begin = time.monotonic()
            cut = await shell.send(ATTACKS[attack], duration_s=1.5, max_wait_s=10)
            took = time.monotonic() - begin
            rest = await shell.send("", duration_s=10, max_wait_s=20)
            return took, cut, rest

    took, cut, rest = asyncio.run(go())
    assert took >= 1.5, f"the send returned after {took:.3f} s, while the command still ran"
    assert "E2ND" not in cut and rest.endswith("E2ND\n$ ")
    assert "\x1b]9;t1-" not in cut + rest  # the forged marker is removed like a real one


def test_a_prompt_is_not_taken_for_done_while_a_disowned_job_lives_in_the_shells_tree(tmp_path, request):
    """A job bash no longer counts (``disown``) may still write to the terminal: no prompt ends a wait."""

    async def go() -> tuple[bool, bool]:
        async with make_sandbox("local", request) as sandbox:
            await sandbox.start(environment(tmp_path), timeout_s=60)
            shell = await sandbox.open_shell()
            await shell.send("sleep 60 & disown; echo $! > /tmp/job\n", duration_s=10, max_wait_s=20)
            await shell.send("true\n", duration_s=10, max_wait_s=20)
            with_job = shell._view.waits_alone()
            reap = "kill $(cat /tmp/job); while kill -0 $(cat /tmp/job) 2>/dev/null; do :; done\n"
            await shell.send(reap, duration_s=10, max_wait_s=20)
            await shell.send("true\n", duration_s=10, max_wait_s=20)
            return with_job, shell._view.waits_alone()

    with_job, alone = asyncio.run(go())
    assert not with_job and alone


@pytest.mark.parametrize("attack", sorted(READ_ATTACKS))
@pytest.mark.parametrize(
    "kind",
    [
        "local",
        pytest.param("docker", marks=pytest.mark.docker),
        pytest.param("daytona", marks=pytest.mark.xfail(reason=_NO_VIEW, strict=True)),
    ],
)
def test_a_printed_prompt_marker_does_not_pass_bashs_own_read_for_its_prompt(kind, attack, tmp_path, request):
    """bash blocked in its ``read`` builtin is the foreground, alone, reading: it is not at its prompt."""

    async def go() -> tuple[float, str, str]:
        async with make_sandbox(kind, request) as sandbox:
            await sandbox.start(environment(tmp_path), timeout_s=60)
            shell = await sandbox.open_shell()
            if kind == "docker" and shell.view is None:  # a daemon on another host: no view of bash
                pytest.xfail(_NO_VIEW)
            begin = time.monotonic()
            cut = await shell.send(READ_ATTACKS[attack], duration_s=1.5, max_wait_s=10)
            took = time.monotonic() - begin
            rest = await shell.send("answer\n", duration_s=10, max_wait_s=20)
            return took, cut, rest

    took, cut, rest = asyncio.run(go())
    assert took >= 1.5, f"the send returned after {took:.3f} s, while bash still ran the command"
    assert "E2ND" not in cut and rest.endswith("answer\nE2ND got=answer\n$ "), rest
    assert "\x1b]9;t1-" not in cut + rest
