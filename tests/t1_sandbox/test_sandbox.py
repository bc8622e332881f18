"""Local (bubblewrap) sandbox: isolation, limits, deadlines, reclamation, shell (T1 §6)."""

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import t1_tasks
from t1_sandbox.base import SandboxError, UnsupportedDockerfileInstruction
from t1_sandbox.local import LocalSandbox
from t1_sandbox.local.uids import pids_of_uid

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or os.geteuid() != 0,
    reason="needs bubblewrap (apt-get install bubblewrap) and root",
)


def _env(tmp_path: Path, dockerfile: str = "FROM debian:bookworm-slim\nWORKDIR /app\n", **files: str) -> Path:
    env = tmp_path / "environment"
    env.mkdir(exist_ok=True)
    (env / "Dockerfile").write_text(dockerfile)
    for name, text in files.items():
        (env / name).write_text(text)
    return env


async def _started(tmp_path: Path, **limits) -> LocalSandbox:
    sandbox = LocalSandbox(**limits)
    await sandbox.start(_env(tmp_path), timeout_s=30)
    return sandbox


# ---------------------------------------------------------------- isolation


async def test_no_capabilities_and_uid_zero_unreachable(tmp_path):
    async with await _started(tmp_path) as sb:
        r = await sb.exec(
            "grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status; id -u; cat /proc/self/uid_map", timeout_s=10
        )
        caps = dict(line.split(":\t") for line in r.stdout.splitlines()[:3])
        assert set(caps.values()) == {"0000000000000000"}
        assert r.stdout.splitlines()[3] == "1000"
        inside, _, count = r.stdout.split()[-3:]
        assert (inside, count) == ("1000", "1")  # exactly one uid exists in the sandbox's namespace
        # seen from the host, every process of the sandbox runs as the unprivileged sandbox uid
        running = asyncio.ensure_future(sb.exec("sleep 1", timeout_s=10))
        await asyncio.sleep(0.3)
        assert pids_of_uid(sb.uid) and sb.uid >= 200000
        await running
        r = await sb.exec("python3 -c 'import os; os.setuid(0)'", timeout_s=10)
        assert r.exit_code != 0 and ("Invalid argument" in r.stderr or "PermissionError" in r.stderr)


async def test_host_filesystem_is_read_only_and_task_root_tmp_logs_are_writable(tmp_path):
    async with await _started(tmp_path) as sb:
        r = await sb.exec("touch /usr/x", timeout_s=10)
        assert r.exit_code != 0 and "Read-only file system" in r.stderr
        r = await sb.exec("touch /etc/x", timeout_s=10)
        assert r.exit_code != 0
        r = await sb.exec("touch /app/a /tmp/b /logs/c && ls /app /tmp /logs", timeout_s=10)
        assert r.ok, r.stderr
        host_app = sb.host_root / "app"
        assert (host_app / "a").is_file()


async def test_no_network(tmp_path):
    async with await _started(tmp_path) as sb:
        r = await sb.exec("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '", timeout_s=10)
        assert r.stdout.split() == ["lo"]
        probe = "import socket; socket.create_connection(('1.1.1.1', 53), timeout=2)"
        r = await sb.exec(f'python3 -c "{probe}"', timeout_s=10)
        assert r.exit_code != 0 and "unreachable" in r.stderr.lower()


async def test_repository_and_task_bundles_are_invisible_even_with_the_verifier_toolchain(tmp_path):
    pool_dir = Path(t1_tasks.__file__).parent / "pools" / "mini"
    repo = Path(t1_tasks.__file__).resolve().parents[4]
    async with await _started(tmp_path) as sb:
        r = await sb.exec_verifier(f"ls {pool_dir} {repo}; python3 -c 'import t1_tasks'", timeout_s=20)
        assert r.exit_code != 0
        assert "No such file or directory" in r.stderr and "ModuleNotFoundError" in r.stderr
        # nothing mounted besides the host's /usr and /etc holds a solution script of the pool
        r = await sb.exec(
            "ls /; grep -rl 'git bisect run' /opt /app /tmp /logs /home 2>/dev/null", timeout_s=60
        )
        allowed = {
            "app",
            "bin",
            "dev",
            "etc",
            "home",
            "lib",
            "lib64",
            "logs",
            "opt",
            "proc",
            "sbin",
            "tmp",
            "usr",
        }
        allowed.add(Path(sys.base_prefix).resolve().parts[1])  # the interpreter, mounted at its own path
        assert set(r.stdout.split()) <= allowed
        r = await sb.exec_verifier(
            "python3 -m pytest --version && python3 -m pytest --help | grep -c -- --ctrf", timeout_s=30
        )
        assert r.ok, r.stderr


# ---------------------------------------------------------------- limits and deadlines


async def test_cpu_time_limit_kills_a_busy_loop(tmp_path):
    async with await _started(tmp_path, cpu_time_s=1) as sb:
        t0 = time.monotonic()
        r = await sb.exec("while :; do :; done", timeout_s=20)
        assert not r.timed_out and r.exit_code == 128 + 24  # SIGXCPU at the soft limit
        assert time.monotonic() - t0 < 10


async def test_memory_limit(tmp_path):
    async with await _started(tmp_path, memory_mb=200) as sb:
        r = await sb.exec("python3 -c 'b = bytearray(400 * 1024 * 1024)'", timeout_s=20)
        assert r.exit_code != 0 and "MemoryError" in r.stderr
        r = await sb.exec("python3 -c 'b = bytearray(20 * 1024 * 1024)'", timeout_s=20)
        assert r.ok, r.stderr


async def test_process_limit(tmp_path):
    async with await _started(tmp_path, max_processes=20) as sb:
        r = await sb.exec("for i in $(seq 40); do sleep 1 & done; wait", timeout_s=20)
        assert "Resource temporarily unavailable" in r.stderr
        assert len([p for p in pids_of_uid(sb.uid)]) <= 20


async def test_file_size_limit(tmp_path):
    async with await _started(tmp_path, disk_mb=1) as sb:
        r = await sb.exec("head -c 3000000 /dev/zero > /app/big", timeout_s=20)
        assert r.exit_code != 0
        assert (sb.host_root / "app" / "big").stat().st_size <= 1024 * 1024


async def test_deadline_kills_the_whole_group_background_children_too(tmp_path):
    async with await _started(tmp_path) as sb:
        t0 = time.monotonic()
        r = await sb.exec("sleep 300 & setsid sleep 301 & echo started; sleep 302", timeout_s=1)
        assert r.timed_out and r.exit_code is None and "started" in r.stdout
        assert time.monotonic() - t0 < 5
        await asyncio.sleep(0.2)
        assert pids_of_uid(sb.uid) == [], "a background child of the timed-out exec survived"


# ---------------------------------------------------------------- reclamation


async def test_sandbox_is_gone_after_the_trial_on_normal_exit(tmp_path):
    async with await _started(tmp_path) as sb:
        shell = await sb.open_shell()
        await shell.send("sleep 500 &\n", duration_s=0.5, max_wait_s=2)
        uid, root = sb.uid, sb.host_root
        assert pids_of_uid(uid)
    assert pids_of_uid(uid) == [] and not root.exists()


async def test_sandbox_is_gone_after_the_trial_also_when_it_raises(tmp_path):
    with pytest.raises(RuntimeError, match="trial failed"):
        async with await _started(tmp_path) as sb:
            uid, root = sb.uid, sb.host_root
            exec_task = asyncio.ensure_future(sb.exec("sleep 500", timeout_s=600))
            shell = await sb.open_shell()
            await shell.send("sleep 501\n", duration_s=0.2, max_wait_s=2)
            await asyncio.sleep(0.3)
            assert len(pids_of_uid(uid)) >= 2
            raise RuntimeError("trial failed")
    assert pids_of_uid(uid) == [] and not root.exists()
    exec_task.cancel()
    await asyncio.gather(exec_task, return_exceptions=True)


async def test_sandbox_is_reclaimed_on_cancellation(tmp_path):
    holder: dict = {}

    async def trial():
        async with await _started(tmp_path) as sb:
            holder["uid"], holder["root"] = sb.uid, sb.host_root
            await sb.exec("sleep 30", timeout_s=60)

    task = asyncio.ensure_future(trial())
    give_up = time.monotonic() + 20
    while "uid" not in holder or "sleep" not in _commands(holder["uid"]):  # the exec's command really runs
        assert time.monotonic() < give_up, "the exec never started"
        await asyncio.sleep(0.02)
    cancelled_at = time.monotonic()
    task.cancel()  # what Ctrl-C does to asyncio.run's main task
    await asyncio.wait({task}, timeout=10)
    assert task.cancelled(), "cancellation waited for the command instead of killing it"
    assert time.monotonic() - cancelled_at < 3
    assert pids_of_uid(holder["uid"]) == [] and not holder["root"].exists()


# A cancellation can land anywhere in a launch: before the fork, while asyncio connects the pipes (where
# asyncio itself kills only the launcher and then waits for the pipes to close), during bwrap's set-up (its
# pid 1 arms --die-with-parent only at the end of it) or while the command runs. Iterations of the event
# loop and short delays sweep these points.
CANCEL_POINTS = [("iterations", k) for k in range(8)]
CANCEL_POINTS += [("seconds", ms / 1000) for ms in (1, 2, 4, 7, 12, 20, 40)]


async def _cancel_at(point: tuple[str, float], awaitable) -> float:
    task = asyncio.ensure_future(awaitable)
    kind, amount = point
    if kind == "iterations":
        for _ in range(int(amount)):
            await asyncio.sleep(0)
    else:
        await asyncio.sleep(amount)
    cancelled_at = time.monotonic()
    task.cancel()
    await asyncio.wait({task}, timeout=10)
    assert task.done(), f"cancelled at {point}: still waiting after 10 s (waits for the command)"
    if not task.cancelled():
        task.result()  # finished before the cancel landed; it must not have failed
    return time.monotonic() - cancelled_at


def _settled(uid: int, expected: set[int]) -> set[int]:
    """The live pids of ``uid`` once those already dying are gone (at most 1 s)."""
    give_up = time.monotonic() + 1
    while (pids := set(pids_of_uid(uid))) != expected and time.monotonic() < give_up:
        time.sleep(0.005)
    return pids


async def test_a_cancelled_exec_kills_its_processes_at_any_point_and_never_waits_for_the_command(tmp_path):
    async with await _started(tmp_path) as sb:
        shell = await sb.open_shell()
        bash = set(pids_of_uid(sb.uid))
        for point in CANCEL_POINTS:
            took = await _cancel_at(point, sb.exec("sleep 30", timeout_s=60))
            assert took < 3, f"cancelled at {point}: took {took:.1f} s"
            assert _settled(sb.uid, bash) == bash, f"cancelled at {point}: {_describe(sb.uid)} left"
        assert shell.alive  # only the cancelled exec's processes were killed
        assert (await sb.exec("echo ok", timeout_s=10)).stdout == "ok\n"


async def test_cancelled_upload_download_and_open_shell_leave_no_process(tmp_path):
    payload = tmp_path / "payload.txt"
    payload.write_text("x" * 100_000)
    async with await _started(tmp_path) as sb:
        for point in CANCEL_POINTS[::2]:
            for make in (
                lambda: sb.upload(payload, "/app/payload.txt", timeout_s=30),
                lambda: sb.download("/etc/hostname", tmp_path / "out" / "hostname", timeout_s=30),
                lambda: sb.open_shell(timeout_s=30),
            ):
                took = await _cancel_at(point, make())
                assert took < 3 and _settled(sb.uid, set()) == set(), (point, _describe(sb.uid))
                if sb._shell is not None:
                    await sb._shell.close()


async def test_a_cancelled_or_failed_build_leaves_nothing_behind(tmp_path):
    sb = LocalSandbox()
    env = _env(tmp_path, "FROM debian:bookworm-slim\nRUN sleep 30\n")
    build = asyncio.ensure_future(sb.start(env, timeout_s=60))
    give_up = time.monotonic() + 20
    while sb.uid is None or "sleep" not in _commands(sb.uid):  # the RUN step really runs
        assert time.monotonic() < give_up and not build.done(), "the RUN step never started"
        await asyncio.sleep(0.02)
    uid, root = sb.uid, sb.host_root
    cancelled_at = time.monotonic()
    build.cancel()
    await asyncio.wait({build}, timeout=10)
    assert build.cancelled() and time.monotonic() - cancelled_at < 3
    assert pids_of_uid(uid) == [] and not root.exists()  # no `async with` needed
    (tmp_path / "failing").mkdir()
    sb = LocalSandbox()
    with pytest.raises(SandboxError, match="RUN exited 3"):
        await sb.start(_env(tmp_path / "failing", "FROM debian:bookworm-slim\nRUN exit 3\n"), timeout_s=30)
    assert sb.host_root is None and not list(Path(tempfile.gettempdir()).glob(f"t1-sbx-{sb.uid}-*"))


@pytest.fixture
def private_slots(monkeypatch, tmp_path):
    """A private slot directory over a uid range no real sandbox uses, so the slot numbers are predictable."""
    from t1_sandbox.local import uids as _host

    slot_dir = tmp_path / "slots"
    monkeypatch.setattr(_host, "SLOT_DIR", slot_dir)
    monkeypatch.setattr(_host, "UID_BASE", 260_000 + (os.getpid() % 1000) * 64)
    monkeypatch.setattr(_host, "UID_SLOTS", 64)
    return _host, slot_dir


def test_a_uid_slot_is_never_handed_out_while_a_process_of_it_is_alive(private_slots, monkeypatch):
    _host, _ = private_slots
    uid = _host.UID_BASE  # slot 0, the lowest free one
    stale = subprocess.Popen(["sleep", "30"], user=uid, group=uid)  # left by a process killed with SIGKILL
    try:
        got = _host.acquire_uid_slot()
        try:
            assert got.uid == uid and stale.wait(timeout=5) == -9 and pids_of_uid(uid) == []
        finally:
            got.release()
        # a process that survives SIGKILL (uninterruptible sleep) keeps its slot out of use
        zombie_free = subprocess.Popen(["sleep", "30"], user=uid, group=uid)
        real_kill_uid = _host.kill_uid
        monkeypatch.setattr(_host, "kill_uid", lambda u: [zombie_free.pid] if u == uid else real_kill_uid(u))
        got = _host.acquire_uid_slot()
        try:
            assert got.uid == uid + 1
        finally:
            got.release()
            zombie_free.kill()
            zombie_free.wait()
    finally:
        stale.kill()
        stale.wait()


def test_a_slot_whose_uid_still_has_zombies_is_skipped(private_slots):
    _host, _ = private_slots
    uid = _host.UID_BASE
    child = subprocess.Popen(["true"], user=uid, group=uid)
    deadline = time.monotonic() + 5
    while pids_of_uid(uid, include_zombies=True) == [] or pids_of_uid(uid) != []:
        assert time.monotonic() < deadline  # wait until it has exited but is not reaped: a zombie
        time.sleep(0.01)
    try:
        got = _host.acquire_uid_slot()
        assert got.uid == uid + 1  # the zombie would count against slot 0's RLIMIT_NPROC
        got.release()
    finally:
        child.wait()
    got = _host.acquire_uid_slot()
    assert got.uid == uid  # reaped: slot 0 is free again
    got.release()


def test_slots_are_reused_lowest_first_and_lock_files_removed_on_release(private_slots):
    _host, slot_dir = private_slots
    a, b, c = (_host.acquire_uid_slot() for _ in range(3))
    assert [s.uid - _host.UID_BASE for s in (a, b, c)] == [0, 1, 2]
    assert sorted(p.name for p in slot_dir.iterdir()) == ["0.lock", "1.lock", "2.lock"]
    b.release()
    b.release()  # idempotent
    again = _host.acquire_uid_slot()
    assert again.uid - _host.UID_BASE == 1  # the lowest free slot, not the next in a round robin
    for s in (a, again, c):
        s.release()
    assert list(slot_dir.iterdir()) == []


def test_a_released_lock_file_locked_by_a_late_opener_is_not_taken_for_the_slot(private_slots):
    # Race: B opens slot 0's file, A releases (unlinks) it, B locks the unlinked inode. B must notice and
    # lock the new file at the path instead, else B and a third acquirer C could both hold slot 0.
    import fcntl

    _host, slot_dir = private_slots
    a = _host.acquire_uid_slot()
    stale_fd = os.open(slot_dir / "0.lock", os.O_RDWR)  # B's open, before A's release
    a.release()
    fcntl.flock(stale_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # B's lock succeeds on the unlinked inode
    try:
        c = _host.acquire_uid_slot()  # C creates a fresh 0.lock and holds it
        assert c.uid == _host.UID_BASE
        assert _host._lock(slot_dir / "0.lock") is None  # and nobody else can lock slot 0 now
        c.release()
    finally:
        os.close(stale_fd)


def test_unheld_lock_files_left_by_older_versions_are_pruned_but_held_ones_kept(private_slots):
    import fcntl

    _host, slot_dir = private_slots
    slot_dir.mkdir()
    for n in range(40):
        (slot_dir / f"{n + 10}.lock").touch()
    held = os.open(slot_dir / "20.lock", os.O_RDWR)
    fcntl.flock(held, fcntl.LOCK_EX)  # another process's live sandbox
    try:
        got = _host.acquire_uid_slot()
        got.release()
        assert [p.name for p in slot_dir.iterdir()] == ["20.lock"]
    finally:
        os.close(held)


async def test_fifty_sandboxes_in_a_row_leave_at_most_a_handful_of_lock_files(private_slots, tmp_path):
    _host, slot_dir = private_slots
    env = _env(tmp_path)
    for _ in range(50):
        async with LocalSandbox() as sb:
            await sb.start(env, timeout_s=30)
            assert (await sb.exec("true", timeout_s=10)).ok
    # Each lock file went with its sandbox (before: one file per slot ever used, 50 here). The uids may
    # still differ: a slot whose uid has an unreaped zombie (init can take seconds to reap the sandbox's
    # pid 1) is skipped, see test_a_slot_whose_uid_still_has_zombies_is_skipped.
    assert len(list(slot_dir.iterdir())) <= 1


async def test_close_is_idempotent_and_a_closed_sandbox_refuses_work(tmp_path):
    sb = await _started(tmp_path)
    await sb.close()
    await sb.close()
    with pytest.raises(SandboxError):
        await sb.exec("true", timeout_s=5)


# ---------------------------------------------------------------- Dockerfile subset


async def test_dockerfile_workdir_copy_env_run(tmp_path):
    env = _env(
        tmp_path,
        'FROM debian:bookworm-slim\nWORKDIR /srv/task\nENV GREETING=hello NAME="t one"\n'
        "COPY data.txt /srv/task/in/data.txt\n"
        'RUN cat in/data.txt > out.txt && echo "$GREETING $NAME" >> out.txt\n',
        **{"data.txt": "payload\n"},
    )
    async with LocalSandbox() as sb:
        await sb.start(env, timeout_s=30)
        assert sb.task_root == "/srv/task"
        r = await sb.exec("pwd; cat out.txt; echo $NAME", timeout_s=10)
        assert r.stdout == "/srv/task\npayload\nhello t one\nt one\n"


@pytest.mark.parametrize(
    ("dockerfile", "match"),
    [
        ("FROM debian:bookworm-slim\nWORKDIR /app\n\nUSER nobody\n", r"Dockerfile:4: instruction USER"),
        ("FROM debian:bookworm-slim\nEXPOSE 80\n", r"Dockerfile:2: instruction EXPOSE"),
        ("FROM ubuntu:24.04\n", r"Dockerfile:1: base image 'ubuntu:24.04'"),
        ("WORKDIR /app\n", r"first instruction must be FROM"),
    ],
)
async def test_unsupported_instructions_are_refused_by_name_and_line(tmp_path, dockerfile, match):
    async with LocalSandbox() as sb:
        with pytest.raises(UnsupportedDockerfileInstruction, match=match):
            await sb.start(_env(tmp_path, dockerfile), timeout_s=30)


async def test_run_is_confined_to_the_task_root(tmp_path):
    async with LocalSandbox() as sb:
        with pytest.raises(SandboxError, match=r"Dockerfile:3: RUN exited"):
            await sb.start(
                _env(tmp_path, "FROM debian:bookworm-slim\nWORKDIR /app\nRUN touch /usr/bin/x\n"),
                timeout_s=30,
            )


# ---------------------------------------------------------------- files


async def test_upload_download_round_trip_and_tests_hidden_from_the_open_shell(tmp_path):
    src = tmp_path / "tests"
    (src / "sub").mkdir(parents=True)
    (src / "test.sh").write_text("echo hi\n")
    (src / "sub" / "f.txt").write_text("deep\n")
    async with await _started(tmp_path) as sb:
        shell = await sb.open_shell()
        await sb.upload(src, "/tests")
        r = await sb.exec("cat /tests/test.sh /tests/sub/f.txt", timeout_s=10)
        assert r.stdout == "echo hi\ndeep\n"
        out = await shell.send("ls /tests; echo END\n", duration_s=2, max_wait_s=5)
        assert "No such file or directory" in out, "the agent's shell can see the uploaded tests"
        await sb.exec("mkdir -p /logs/verifier && echo '{}' > /logs/verifier/x.json", timeout_s=10)
        await sb.download("/logs/verifier", tmp_path / "got")
        assert (tmp_path / "got" / "x.json").read_text() == "{}\n"
        await sb.upload(src / "test.sh", "/app/single.sh")
        await sb.download("/app/single.sh", tmp_path / "single.sh")
        assert (tmp_path / "single.sh").read_text() == "echo hi\n"


async def test_download_does_not_follow_links_out_of_the_sandbox(tmp_path):
    async with await _started(tmp_path) as sb:
        await sb.exec("mkdir -p /logs/verifier && ln -s /etc/hostname /logs/verifier/leak", timeout_s=10)
        await sb.download("/logs/verifier", tmp_path / "got")
        leak = tmp_path / "got" / "leak"
        assert not leak.exists() and not leak.is_symlink()


# ---------------------------------------------------------------- persistent shell


async def test_shell_keeps_working_directory_and_environment(tmp_path):
    async with await _started(tmp_path) as sb:
        shell = await sb.open_shell()
        await shell.send("mkdir -p /app/d && cd /app/d && export X=42\n", duration_s=5, max_wait_s=5)
        out = await shell.send("pwd; echo X=$X\n", duration_s=5, max_wait_s=5)
        assert "/app/d\n" in out and "X=42\n" in out


async def test_shell_returns_early_when_idle(tmp_path):
    async with await _started(tmp_path) as sb:
        shell = await sb.open_shell()
        t0 = time.monotonic()
        out = await shell.send("echo quick\n", duration_s=10, max_wait_s=10)
        assert "quick" in out and time.monotonic() - t0 < 2


async def test_long_command_output_arrives_on_a_later_send(tmp_path):
    async with await _started(tmp_path) as sb:
        shell = await sb.open_shell()
        out = await shell.send("echo A$((1+1)); sleep 1.5; echo B$((2+2))\n", duration_s=0.5, max_wait_s=5)
        assert "A2\n" in out and "B4" not in out
        later = await shell.send("", duration_s=5, max_wait_s=5)
        assert "B4\n" in later and "A2" not in later


async def test_ctrl_c_interrupts_and_exit_makes_the_shell_dead(tmp_path):
    async with await _started(tmp_path) as sb:
        shell = await sb.open_shell()
        await shell.send("sleep 100\n", duration_s=0.3, max_wait_s=2)
        t0 = time.monotonic()
        out = await shell.send("\x03", duration_s=5, max_wait_s=5)
        # returned at the prompt, not at the end of the 5 s wait (margin for a loaded machine)
        assert time.monotonic() - t0 < 4.5 and "$ " in out
        assert shell.alive
        await shell.send("exit\n", duration_s=2, max_wait_s=2)
        for _ in range(600):  # the shell's end is noticed by its reader task: wait for it, bounded
            if not shell.alive:
                break
            await asyncio.sleep(0.05)
        assert not shell.alive
        with pytest.raises(SandboxError, match="dead"):
            await shell.send("echo\n", duration_s=1, max_wait_s=1)


# ---------------------------------------------------------------- Ctrl-C, spec


CTRL_C_SCRIPT = """
import asyncio, sys
from pathlib import Path
from t1_sandbox.local import LocalSandbox

async def main():
    env = Path(sys.argv[1])
    async with LocalSandbox() as sb:
        await sb.start(env, timeout_s=30)
        shell = await sb.open_shell()
        await shell.send("sleep 600 &\\n", duration_s=0.3, max_wait_s=2)
        print(sb.uid, sb.host_root, flush=True)
        await sb.exec("sleep 600", timeout_s=900)

asyncio.run(main())
"""


def test_sandbox_is_reclaimed_on_ctrl_c(tmp_path):
    import signal
    import subprocess

    script = tmp_path / "trial.py"
    script.write_text(CTRL_C_SCRIPT)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(_env(tmp_path))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    uid_text, root = proc.stdout.readline().split()
    uid = int(uid_text)
    time.sleep(0.3)
    assert pids_of_uid(uid), "the sandbox should be running"
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)
    assert pids_of_uid(uid) == [] and not Path(root).exists()


def test_from_spec_reads_the_t1_spec_fields():
    t1_spec = pytest.importorskip("t1_spec")
    spec = t1_spec.sandbox.LocalSandboxSpec(cpu_time_s=7, memory_mb=300, max_processes=9, disk_mb=5)
    sb = LocalSandbox.from_spec(spec)
    assert (sb.cpu_time_s, sb.memory_mb, sb.max_processes, sb.disk_mb, sb.network) == (7, 300, 9, 5, False)


def _describe(uid: int) -> list[str]:
    """``pid name state ppid nspid`` of every live process of ``uid`` (for assertion messages)."""
    out = []
    for pid in pids_of_uid(uid):
        try:
            fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        except OSError:
            continue
        out.append(" ".join([str(pid)] + [fields[k].strip() for k in ("Name", "State", "PPid", "NSpid")]))
    return out


def _commands(uid: int) -> list[str]:
    return [Path(f"/proc/{pid}/comm").read_text().strip() for pid in pids_of_uid(uid)]


async def test_tmux_key_name_c_c_interrupts(tmp_path):
    async with await _started(tmp_path) as sb:
        shell = await sb.open_shell()
        await shell.send("sleep 100\n", duration_s=0.3, max_wait_s=2)
        assert "sleep" in _commands(sb.uid)
        out = await shell.send("C-c", duration_s=5, max_wait_s=5)
        assert "^C" in out and shell.alive
        assert "sleep" not in _commands(sb.uid)


async def test_output_floods_are_bounded(tmp_path):
    async with await _started(tmp_path) as sb:
        r = await sb.exec("head -c 20000000 /dev/zero | tr '\\0' x", timeout_s=30)
        assert r.ok and len(r.stdout) < 9 * 1024 * 1024 and "bytes omitted" in r.stdout
        shell = await sb.open_shell()
        out = await shell.send(
            "head -c 6000000 /dev/zero | tr '\\0' y; echo; echo END\n", duration_s=10, max_wait_s=10
        )
        assert len(out) <= shell.MAX_UNREAD + 200 and "bytes omitted" in out and out.rstrip().endswith("$")


# ---------------------------------------------------------------- aggregate limits and hardening (local side)


async def test_every_launch_runs_in_the_sandbox_cgroup_with_the_spec_limits_removed_at_close(tmp_path):
    from t1_sandbox.local.cgroups import leftover_cgroups

    async with await _started(tmp_path, memory_mb=300, max_processes=50, cpus=0.5) as sb:
        group = sb._cgroup
        running = asyncio.ensure_future(sb.exec("sleep 2", timeout_s=10))
        await asyncio.sleep(0.5)
        assert set(pids_of_uid(sb.uid)) <= set(group.pids()) and group.pids()
        await running
        values = {d.name: d for d in group.dirs}
        assert len(values) == 1  # one name in every hierarchy
        wanted = (
            "memory.max",
            "memory.limit_in_bytes",
            "pids.max",
            "cpu.max",
            "cpu.cfs_quota_us",
            "cpu.cfs_period_us",
        )
        files = {n: (d / n).read_text().split()[0] for d in group.dirs for n in wanted if (d / n).exists()}
        if "memory.max" in files:  # cgroup v2
            assert files["memory.max"] == str(300 << 20) and files["pids.max"] == "50"
            assert files["cpu.max"] == "50000"
        else:
            assert files["memory.limit_in_bytes"] == str(300 << 20) and files["pids.max"] == "50"
            assert files["cpu.cfs_quota_us"] == "50000" and files["cpu.cfs_period_us"] == "100000"
    assert not any(d.exists() for d in group.dirs)
    assert not [g for g in leftover_cgroups() if g.name == group.name]


def test_a_cgroup_of_a_dead_owner_is_a_leftover_and_is_swept():
    from t1_sandbox.local.cgroups import cgroup_hierarchy, leftover_cgroups, sweep_dead_cgroups

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    start = Path(f"/proc/{child.pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[19].decode()
    name = f"sbx-{child.pid}-{start}-deadbeef"
    groups = [root / name for root in cgroup_hierarchy().roots]
    for g in groups:
        g.mkdir(parents=True)
    try:
        assert not set(groups) & set(leftover_cgroups())  # its owner lives: not ours to touch
        child.kill()
        child.wait()
        assert set(groups) <= set(leftover_cgroups())
        sweep_dead_cgroups()
        assert not any(g.exists() for g in groups)
    finally:
        for g in groups:
            with contextlib.suppress(OSError):
                g.rmdir()


def test_the_seccomp_program_denies_the_list_and_allows_the_rest():
    # an independent interpreter of the classic BPF subset the filter uses
    import struct

    from t1_sandbox.local.seccomp import DENIED, SYSCALL_NUMBERS, seccomp_program

    def run(program: bytes, arch: int, nr: int) -> int:
        insns = [struct.unpack("<HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
        pc, acc = 0, 0
        while True:
            code, jt, jf, k = insns[pc]
            if code == 0x20:
                acc = arch if k == 4 else nr
            elif code in (0x15, 0x35):
                hit = acc == k if code == 0x15 else acc >= k
                pc += jt if hit else jf
            elif code == 0x06:
                return k
            pc += 1

    for machine, arch in (("x86_64", 0xC000003E), ("aarch64", 0xC00000B7)):
        program = seccomp_program(machine)
        table = SYSCALL_NUMBERS[machine]
        for name in DENIED:
            if name in table:
                assert run(program, arch, table[name]) == 0x00050001, (machine, name)  # ERRNO | EPERM
        for nr in (0, 1, 56, 57, 59, 60, 220, 221):  # read, write, clone, fork, execve, exit, ...
            if nr not in table.values():
                assert run(program, arch, nr) == 0x7FFF0000, (machine, nr)
        assert run(program, 0x40000003, 1) == 0x80000000  # a foreign ABI (i386) is killed
    assert run(seccomp_program("x86_64"), 0xC000003E, 0x40000000 | 1) == 0x00050001  # x32 numbering


def test_preflight_names_missing_cgroups(monkeypatch):
    from t1_sandbox.local import cgroups

    monkeypatch.setattr(cgroups, "_HIERARCHY", "no cgroup hierarchy with the memory controller(s) is mounted")
    problems = LocalSandbox.preflight(None)
    assert any("cgroups" in p and "memory" in p and p.startswith("sandbox.kind 'local': ") for p in problems)
