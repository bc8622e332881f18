"""The Daytona backend's persistent shell and create retries, on the real SDK against the fake Daytona API.

The shell is the SDK's PTY session over the toolbox websocket (``daytona_fake.py`` answers it as the daemon
does, running the login shell on a host pseudo-terminal under bubblewrap); what the fake cannot show (the
daemon's own PTY, a real network between the two) is in ``docs/backends/daytona.md``.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import time
from pathlib import Path

import pytest

from t1_sandbox import SandboxError, SandboxTimeout, ShellDied
from t1_sandbox.daytona import DaytonaSandbox
from t1_sandbox.daytona.shell import DaytonaShell
from t1_spec import DaytonaSandboxSpec

sys.path.insert(0, str(Path(__file__).parent))
from daytona_fake import FakeDaytona  # noqa: E402

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="the fake Daytona runs commands with bwrap"
)


@pytest.fixture
def fake(tmp_path, monkeypatch):
    server = FakeDaytona(tmp_path).start()
    monkeypatch.setenv("DAYTONA_API_KEY", "test-key")
    monkeypatch.setenv("DAYTONA_API_URL", server.url)
    yield server
    server.stop()


def _task(tmp_path: Path) -> Path:
    task = tmp_path / "shell-task"
    (task / "environment").mkdir(parents=True, exist_ok=True)
    (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (task / "task.toml").write_text("")
    return task / "environment"


def _spec(control_timeout_s: float = 5) -> DaytonaSandboxSpec:
    return DaytonaSandboxSpec(control_timeout_s=control_timeout_s)


def _settled(check, timeout_s: float = 10) -> bool:
    """``check()`` turned true within ``timeout_s`` (the fake reaps a killed shell in its own thread)."""
    end = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


async def _send(shell, keys: str, wait: float = 10) -> str:
    return await shell.send(keys, duration_s=wait, max_wait_s=wait + 5)


def test_cwd_and_variables_persist_between_sends_and_the_prompt_marker_is_removed(fake, tmp_path):
    async def go():
        async with DaytonaSandbox.from_spec(_spec()) as sb:
            await sb.start(_task(tmp_path), timeout_s=30)
            shell = await sb.open_shell()
            first = await _send(shell, "cd /tmp && export T1X=forty-two && mkdir -p d\n")
            later = await _send(shell, 'cd d; echo "[$T1X] $(pwd)"\n')
            return first, later, shell.alive

    first, later, alive = asyncio.run(go())
    assert "[forty-two] /tmp/d" in later and alive
    assert "\x1b]9;t1-" not in first + later  # the idle marker is not what the agent reads
    assert later.rstrip().endswith("$")  # the prompt is shown, as a terminal shows it
    (asked,) = fake.calls("pty_connect")
    assert (asked["cols"], asked["rows"], asked["cwd"]) == (160, 40, "/app")  # Terminus's pane, task root
    assert _settled(lambda: fake.pty_sessions() == []) and fake.live() == []


def test_a_login_shell_that_is_not_bash_is_replaced_by_bash(fake, tmp_path):
    fake.pty_shell = ("sh", "-i")  # an image whose $SHELL is dash

    async def go():
        async with DaytonaSandbox.from_spec(_spec()) as sb:
            await sb.start(_task(tmp_path), timeout_s=30)
            shell = await sb.open_shell()
            return await _send(shell, 'echo "bash=${BASH_VERSION:+yes}"\n')

    assert "bash=yes" in asyncio.run(go())


def test_a_hanging_command_returns_at_the_deadline_and_ctrl_c_gives_the_shell_back(fake, tmp_path):
    async def go():
        async with DaytonaSandbox.from_spec(_spec()) as sb:
            await sb.start(_task(tmp_path), timeout_s=30)
            shell = await sb.open_shell()
            begin = time.monotonic()
            hung = await shell.send("echo started; sleep 300\n", duration_s=1.0, max_wait_s=3.0)
            took = time.monotonic() - begin
            still = shell.alive
            await shell.send("C-c", duration_s=2, max_wait_s=3)
            back = await _send(shell, "echo back-$((6*7))\n")
            return hung, took, still, back

    hung, took, still, back = asyncio.run(go())
    assert "started" in hung and 0.9 <= took < 3.0 and still
    assert "back-42" in back


def test_output_beyond_the_unread_cap_keeps_its_head_and_tail_and_says_how_much_was_dropped(fake, tmp_path):
    total = 3 * 1024 * 1024

    async def go():
        async with DaytonaSandbox.from_spec(_spec()) as sb:
            await sb.start(_task(tmp_path), timeout_s=30)
            shell = await sb.open_shell()
            out = await _send(
                shell, f"echo HEAD; head -c {total} /dev/zero | tr '\\0' a; echo; echo TAIL\n", 60
            )
            after = await _send(shell, "echo fine\n")
            return out, after

    out, after = asyncio.run(go())
    assert "HEAD" in out[:4096] and "TAIL" in out[-4096:]
    assert len(out) <= DaytonaShell.MAX_UNREAD + 200
    dropped = int(out.split("[... ", 1)[1].split(" bytes omitted")[0])
    assert dropped >= total - DaytonaShell.MAX_UNREAD  # what was cut is counted, not silently lost
    assert "fine" in after


def test_exit_is_the_agents_doing_with_its_status(fake, tmp_path):
    async def go():
        async with DaytonaSandbox.from_spec(_spec()) as sb:
            await sb.start(_task(tmp_path), timeout_s=30)
            shell = await sb.open_shell()
            await _send(shell, "exit 3\n", 3)
            for _ in range(100):
                if not shell.alive:
                    break
                await asyncio.sleep(0.05)
            with pytest.raises(ShellDied, match="exit 3") as died:
                await _send(shell, "echo x\n")
            return died.value.exit_code

    assert asyncio.run(go()) == 3
    assert fake.live() == []


def test_a_dropped_websocket_is_an_infrastructure_failure_not_shell_died(fake, tmp_path):
    async def go():
        async with DaytonaSandbox.from_spec(_spec()) as sb:
            await sb.start(_task(tmp_path), timeout_s=30)
            shell = await sb.open_shell()
            await _send(shell, "true\n")
            await asyncio.to_thread(fake.drop_pty, shell.session_id)
            for _ in range(100):
                if not shell.alive:
                    break
                await asyncio.sleep(0.05)
            with pytest.raises(SandboxError, match="infrastructure") as lost:
                await _send(shell, "echo x\n")
            return lost.value

    assert not isinstance(asyncio.run(go()), ShellDied)
    assert fake.live() == []


def test_stop_agent_kills_the_shell_and_what_it_left_running(fake, tmp_path):
    async def go():  # the kill walks /proc, which in the fake is the whole host's: a longer deadline
        async with DaytonaSandbox.from_spec(_spec(control_timeout_s=60)) as sb:
            await sb.start(_task(tmp_path), timeout_s=30)
            shell = await sb.open_shell()
            await _send(shell, "(setsid sleep 301 &) ; sleep 302 & echo $! > /tmp/job\n")
            await asyncio.sleep(0.3)
            await sb.stop_agent()
            # A SIGKILLed child whose new parent does not reap it stays a zombie (state Z), which
            # `kill -0` still finds: only a process in any other state is alive.
            left = await sb.exec(
                "s=$(awk '{print $3}' /proc/$(cat /tmp/job)/stat 2>/dev/null); "
                '[ -n "$s" ] && [ "$s" != Z ] && echo job-alive; '
                "pgrep -f 'slee[p] 301' >/dev/null && echo setsid-alive; echo checked",
                timeout_s=10,
            )
            with pytest.raises(SandboxError, match="closed shell"):
                await _send(shell, "echo x\n")
            return left.stdout

    out = asyncio.run(go())
    assert out.strip() == "checked"
    assert fake.calls("pty_delete") and _settled(lambda: fake.pty_sessions() == [])


@pytest.mark.parametrize("how", ["close", "raise", "cancel"])
def test_the_shell_and_the_sandbox_are_reclaimed_on_every_exit_path(fake, tmp_path, how):
    async def go():
        async def trial():
            async with DaytonaSandbox.from_spec(_spec()) as sb:
                await sb.start(_task(tmp_path), timeout_s=30)
                shell = await sb.open_shell()
                await _send(shell, "sleep 303 &\n")
                if how == "raise":
                    raise RuntimeError("harness bug")
                if how == "cancel":
                    await shell.send("sleep 304\n", duration_s=60, max_wait_s=60)
                await shell.close()
                await shell.close()  # idempotent

        task = asyncio.create_task(trial())
        if how == "cancel":
            while not any(b"sleep 304" in d for s in fake._ptys.values() for d in s.input):
                await asyncio.sleep(0.05)
            task.cancel()
        await task

    expected = {"close": None, "raise": RuntimeError, "cancel": asyncio.CancelledError}[how]
    if expected is None:
        asyncio.run(go())
    else:
        with pytest.raises(expected):
            asyncio.run(go())
    assert fake.calls("pty_delete") and _settled(lambda: fake.pty_sessions() == [])
    assert len(fake.deleted) == 1 and fake.live() == []


def test_a_hung_pty_websocket_is_a_timeout_naming_the_call_and_everything_is_deleted(fake, tmp_path):
    async def go():
        async with DaytonaSandbox.from_spec(_spec()) as sb:
            await sb.start(_task(tmp_path), timeout_s=30)
            fake.hang.add("pty_connect")
            await sb.open_shell(timeout_s=2)

    with pytest.raises(SandboxTimeout, match="daytona create_pty_session"):
        asyncio.run(go())
    assert fake.live() == []


def test_a_shell_whose_bash_is_missing_fails_at_start_with_what_it_printed(fake, tmp_path):
    fake.pty_shell = ("sh", "-c", "echo no bash here; exec sh -c 'read x; exit 127'")

    async def go():
        async with DaytonaSandbox.from_spec(_spec()) as sb:
            await sb.start(_task(tmp_path), timeout_s=30)
            await sb.open_shell(timeout_s=5)

    with pytest.raises(SandboxError, match="no bash here"):
        asyncio.run(go())
    assert fake.live() == [] and _settled(lambda: fake.pty_sessions() == [])


# ---------------------------------------------------------------------- create: 429 and 5xx
def test_a_rate_limited_create_is_tried_again_after_retry_after_and_succeeds(fake, tmp_path):
    fake.fail_next["create"] = [429, 429]
    fake.retry_after = "0.2"

    async def go():
        async with DaytonaSandbox.from_spec(_spec()) as sb:
            await sb.start(_task(tmp_path), timeout_s=30)
            return (await sb.exec("echo up", timeout_s=10)).stdout

    begin = time.monotonic()
    assert asyncio.run(go()) == "up\n"
    assert time.monotonic() - begin >= 0.4  # two waits of Retry-After
    assert fake.calls("refused") == [429, 429] and len(fake.calls("create")) == 1
    assert len(fake.sandboxes) == 1 and fake.live() == []


def test_a_create_refused_until_the_deadline_is_an_infrastructure_failure_naming_each_answer(fake, tmp_path):
    fake.fail["create"] = 503

    async def go():
        async with DaytonaSandbox.from_spec(_spec()) as sb:
            await sb.start(_task(tmp_path), timeout_s=6)

    begin = time.monotonic()
    with pytest.raises(SandboxError, match=r"HTTP 503, HTTP 503.*infrastructure failure") as err:
        asyncio.run(go())
    assert time.monotonic() - begin < 6 + 1  # inside the start deadline
    assert not isinstance(err.value, SandboxTimeout)
    assert len(fake.calls("refused")) >= 2 and fake.sandboxes == {}


def test_a_5xx_after_the_sandbox_was_made_retries_under_a_new_name_and_both_are_deleted(fake, tmp_path):
    fake.fail_next["create_made"] = [500]
    fake.retry_after = "0"

    async def go():
        async with DaytonaSandbox.from_spec(_spec()) as sb:
            await sb.start(_task(tmp_path), timeout_s=30)

    asyncio.run(go())
    names = [body["name"] for body in fake.calls("create")]
    assert len(names) == 2 and names[0] != names[1]
    assert len(fake.sandboxes) == 2 and sorted(fake.deleted) == sorted(fake.sandboxes) and fake.live() == []


def test_a_refusal_that_is_not_transient_is_not_tried_again(fake, tmp_path):
    fake.fail["create"] = 400

    async def go():
        async with DaytonaSandbox.from_spec(_spec()) as sb:
            await sb.start(_task(tmp_path), timeout_s=30)

    with pytest.raises(SandboxError, match="daytona create"):
        asyncio.run(go())
    assert fake.calls("refused") == [400]  # once: a bad request is not tried again
    assert fake.sandboxes == {}
