"""The local sandbox's launch server: launches never fork the caller, die with it, and say what failed."""

import asyncio
import os
import secrets
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from t1_sandbox.base import SandboxError
from t1_sandbox.local import LocalSandbox
from t1_sandbox.local import sandbox as sandbox_module
from t1_sandbox.local.spawner import spawner

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(
        shutil.which("bwrap") is None or os.geteuid() != 0,
        reason="needs bubblewrap (apt-get install bubblewrap) and root",
    ),
]
NOBODY = 65534


def _env(tmp_path: Path) -> Path:
    env = tmp_path / "environment"
    env.mkdir(exist_ok=True)
    (env / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    return env


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


def _gone(pid: int, within_s: float = 20.0) -> bool:
    """Whether ``pid`` is gone or a zombie within ``within_s`` (a generous bound, not a timing claim)."""
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


async def test_a_launch_is_forked_by_the_small_server_not_by_this_process(tmp_path):
    async with LocalSandbox() as sb:
        await sb.start(_env(tmp_path), timeout_s=30)
        running = asyncio.ensure_future(sb.exec("sleep 30", timeout_s=60))
        while not sb._procs:
            await asyncio.sleep(0.01)
        (proc,) = sb._procs
        server = spawner().proc.pid
        assert _ppid(proc.pid) == server != os.getpid()
        with open(f"/proc/{server}/status") as fh:
            rss_kib = next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))
        assert rss_kib < 64 * 1024  # a bare interpreter, whatever this process holds
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        r = await sb.exec("echo out; echo err >&2; exit 3", timeout_s=30)
        assert (r.stdout, r.stderr, r.exit_code) == ("out\n", "err\n", 3)


async def test_launch_errors_name_the_step_that_failed():
    with pytest.raises(SandboxError, match=r"joining the sandbox's cgroup \(/nonexistent/cgroup.procs\)"):
        await spawner().spawn(
            ["t"],
            executable="/bin/true",
            fds=[0, 1, 2],
            uid=NOBODY,
            cgroup_procs=["/nonexistent/cgroup.procs"],
        )
    with pytest.raises(SandboxError, match=r"executing /nonexistent/bwrap: .*No such file"):
        await spawner().spawn(["t"], executable="/nonexistent/bwrap", fds=[0, 1, 2], uid=NOBODY)


async def test_a_launch_runs_as_its_uid_in_a_new_session_with_default_signals():
    read, write = os.pipe()
    try:
        proc = await spawner().spawn(
            ["probe", "-c", "id -u; id -G; cut -d' ' -f6 /proc/$$/stat; grep -E '^SigIgn' /proc/$$/status"],
            executable="/bin/sh",
            fds=[0, write, 2],
            uid=NOBODY,
        )
    finally:
        os.close(write)
    assert await proc.wait() == 0 and proc.returncode == 0
    with os.fdopen(read) as fh:
        uid, groups, sid, ignored = fh.read().split("\n")[:4]
    assert uid == groups == str(NOBODY)
    assert int(sid) == proc.pid  # its own session
    assert ignored.split()[1] == "0000000000000000"  # SIGPIPE, SIGINT, ... not left ignored by the server


def test_signals_the_trainer_inherited_ignored_are_default_in_a_launch():
    # a trainer started with '&' by a non-interactive shell has SIGQUIT (and SIGINT) ignored; ignored stays
    # ignored across fork and exec, so the sandbox's processes would inherit it unless the server resets all
    script = textwrap.dedent(
        """
        import asyncio, os, signal
        from t1_sandbox.local.spawner import spawner

        for sig in (signal.SIGQUIT, signal.SIGUSR1, signal.SIGRTMIN + 3):
            signal.signal(sig, signal.SIG_IGN)

        async def main():
            read, write = os.pipe()
            proc = await spawner().spawn(
                ["probe", "-c", "grep -E '^SigIgn' /proc/$$/status"], executable="/bin/sh", fds=[0, write, 2],
                uid=65534,
            )
            os.close(write)
            code = await proc.wait()
            with os.fdopen(read) as fh:
                print(code, fh.read().split()[1])

        asyncio.run(main())
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "0000000000000000"], out.stdout


def test_a_dead_server_ends_the_waits_and_is_replaced():
    # in a process of its own: killing this process's server would end other tests' sandboxes
    script = textwrap.dedent(
        """
        import asyncio, os, signal
        from t1_sandbox.local.spawner import spawner

        async def main():
            first = spawner()
            proc = await first.spawn(["sleeper", "600"], executable="/bin/sleep", fds=[0, 1, 2], uid=65534)
            os.kill(first.proc.pid, signal.SIGKILL)
            code = await asyncio.wait_for(proc.wait(), timeout=30)
            first.proc.wait()
            os.kill(proc.pid, signal.SIGKILL)  # the sleeper, if its parent's death did not reach it
            second = spawner()
            again = await second.spawn(["t"], executable="/bin/true", fds=[0, 1, 2], uid=65534)
            print(code, second is not first, second.alive, await again.wait())

        asyncio.run(main())
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    code, replaced, alive, second_exit = out.stdout.split()
    assert int(code) < 0 and (replaced, alive, second_exit) == ("True", "True", "0")


def test_the_server_and_its_launches_die_with_the_process_that_started_it(tmp_path):
    script = textwrap.dedent(
        """
        import asyncio, sys
        from t1_sandbox.local.spawner import spawner

        async def main():
            s = spawner()
            proc = await s.spawn(["/bin/sleep", "600"], executable="/bin/sleep", fds=[0, 1, 2], uid=65534)
            print(s.proc.pid, proc.pid, flush=True)
            await asyncio.sleep(600)

        asyncio.run(main())
        """
    )
    client = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        server, sleeper = map(int, client.stdout.readline().split())
        assert _ppid(server) == client.pid and _ppid(sleeper) == server
        client.kill()  # SIGKILL: no clean-up of its own
        client.wait()
        assert _gone(server), "the launch server outlived its parent"
        assert _gone(sleeper), "a launch outlived the process that asked for it"
    finally:
        client.kill()


async def test_a_mask_path_removed_between_listing_and_launch_is_skipped(tmp_path, monkeypatch):
    top = Path(f"/usr/local/share/t1-mask-test-{secrets.token_hex(4)}")
    bundle = top / "t1_tasks"
    bundle.mkdir(parents=True)
    (bundle / "solution.sh").write_text("the reference solution\n")
    monkeypatch.setattr(sandbox_module, "bundle_masks", lambda verifier: (str(bundle),))
    try:
        async with LocalSandbox() as sb:
            await sb.start(_env(tmp_path), timeout_s=30)
            r = await sb.exec(f"ls -A {bundle}", timeout_s=30)  # listed: covered by an empty tmpfs
            assert (r.exit_code, r.stdout) == (0, "")
            shutil.rmtree(bundle)  # gone after the listing, before the next launch
            r = await sb.exec(f"test -e {bundle} || echo absent", timeout_s=30)
            assert (r.exit_code, r.stdout, r.stderr) == (0, "absent\n", "")
            shell = await sb.open_shell()
            assert "ok" in await shell.send("echo ok\n", duration_s=5, max_wait_s=10)
    finally:
        shutil.rmtree(top, ignore_errors=True)


async def test_start_sets_the_sandbox_up_off_the_event_loop(tmp_path, monkeypatch):
    threads = []
    acquire = sandbox_module.acquire_uid_slot

    def recorded():
        threads.append(threading.current_thread())
        return acquire()

    monkeypatch.setattr(sandbox_module, "acquire_uid_slot", recorded)
    async with LocalSandbox() as sb:
        await sb.start(_env(tmp_path), timeout_s=30)
        assert (await sb.exec("echo up", timeout_s=30)).stdout == "up\n"
    assert threads and threads[0] is not threading.current_thread()  # the uid slot's /proc scan, the mounts


async def test_a_launch_holds_no_descriptor_of_the_server_or_of_another_launch(tmp_path):
    async with LocalSandbox() as sb:
        await sb.start(_env(tmp_path), timeout_s=30)
        other = asyncio.ensure_future(sb.exec("sleep 30", timeout_s=60))  # its connection is open meanwhile
        while not sb._procs:
            await asyncio.sleep(0.01)
        r = await sb.exec("ls -l /proc/1/fd/ /proc/self/fd/", timeout_s=30)
        assert "socket:" not in r.stdout and r.exit_code == 0
        for proc in list(sb._procs):  # the host's view of each bwrap: no socket (the launch server's) open
            held = [os.readlink(f"/proc/{proc.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{proc.pid}/fd")]
            assert not [h for h in held if h.startswith("socket:")], held
        other.cancel()
        with pytest.raises(asyncio.CancelledError):
            await other
