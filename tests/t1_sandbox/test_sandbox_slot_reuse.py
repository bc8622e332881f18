"""Local sandbox: a cleanly reclaimed uid slot goes to the next sandbox at once; others are swept (T1 §6).

The claims: every sandbox is reclaimed (no process, directory, tmpfs or cgroup of it left after ``close``);
a sandbox whose launches all exited by themselves hands its held slot to the next sandbox of the process with
no ``/proc`` scan; one whose close had to kill a launch gives its slot back, so the next holder scans for
leftovers and zombies as before; a forked child never receives its parent's held slots; the ``/proc`` scan
reads a process's real uid even when the process named itself after a ``Uid:`` line.
"""

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from t1_sandbox.local import LocalSandbox, uids
from t1_sandbox.local.cgroups import leftover_cgroups
from t1_sandbox.local.rootfs import mount_root, mounted_roots, unmount_own_root
from t1_sandbox.local.uids import pids_of_uid

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or os.geteuid() != 0 or not os.path.exists("/usr/bin/python3"),
    reason="needs bubblewrap (apt-get install bubblewrap) and root",
)


@pytest.fixture
def private_slots(monkeypatch, tmp_path):
    """A private slot folder over a uid range no other sandbox uses; no held slot carried in or out."""
    slot_dir = tmp_path / "slots"
    monkeypatch.setattr(uids, "SLOT_DIR", slot_dir)
    monkeypatch.setattr(uids, "UID_BASE", 270_000 + (os.getpid() % 1000) * 64)
    monkeypatch.setattr(uids, "UID_SLOTS", 64)
    yield slot_dir
    while (held := uids._take_recycled(slot_dir)) is not None:
        held.release()


def _env(tmp_path: Path) -> Path:
    env = tmp_path / "environment"
    env.mkdir(exist_ok=True)
    (env / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    return env


def _assert_reclaimed(sb_uid: int, root: Path) -> None:
    assert pids_of_uid(sb_uid, include_zombies=True) == []
    assert not root.exists() and root not in mounted_roots(root.parent)
    assert not [g for g in leftover_cgroups() if g.name.startswith(f"sbx-{os.getpid()}-")]


async def test_a_clean_sandboxs_slot_goes_to_the_next_one_without_a_proc_scan(
    private_slots, tmp_path, monkeypatch
):
    env = _env(tmp_path)
    async with LocalSandbox() as first:
        await first.start(env, timeout_s=30)
        assert (await first.exec("echo hi", timeout_s=10)).stdout == "hi\n"
        uid, root = first.uid, first.host_root
    _assert_reclaimed(uid, root)
    assert (private_slots / f"{uid - uids.UID_BASE}.lock").exists()  # still held: by this process
    assert uids.hold_if_free(uid) is None  # so no other holder can take it meanwhile

    scans = []
    real_scan = uids._proc_uids
    monkeypatch.setattr(uids, "_proc_uids", lambda: scans.append(1) or real_scan())
    async with LocalSandbox() as second:
        await second.start(env, timeout_s=30)
        assert second.uid == uid and scans == []
        assert (await second.exec("id -u", timeout_s=10)).stdout == "1000\n"
        root = second.host_root
    _assert_reclaimed(uid, root)


async def test_a_sandbox_whose_close_killed_a_launch_gives_its_slot_back(private_slots, tmp_path):
    env = _env(tmp_path)
    sb = LocalSandbox()
    await sb.start(env, timeout_s=30)
    uid, root = sb.uid, sb.host_root
    shell = await sb.open_shell(timeout_s=30)
    await shell.send("sleep 300 &\n", duration_s=0.2, max_wait_s=5)
    r = await sb.exec("sleep 300", timeout_s=0.5)  # killed at its deadline
    assert r.timed_out
    await sb.close()
    _assert_reclaimed(uid, root)
    # given back (lock file removed), not kept: the next holder scans /proc for leftovers and zombies
    assert not (private_slots / f"{uid - uids.UID_BASE}.lock").exists()
    assert uids._take_recycled(private_slots) is None


def test_a_forked_child_never_receives_its_parents_held_slot(private_slots):
    slot = uids.acquire_uid_slot()
    uids.recycle_uid_slot(slot)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's held slot is not its own to hand out
        try:
            got = uids._take_recycled(private_slots)
            os.write(write, b"none" if got is None else str(got.uid).encode())
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 64)
    os.close(read)
    os.waitpid(pid, 0)
    assert answer == b"none"
    assert uids._take_recycled(private_slots) is slot  # the parent still has it
    slot.release()


def test_the_proc_scan_reads_the_real_uid_whatever_the_process_calls_itself(private_slots):
    uid = uids.UID_BASE + 7
    # the kernel escapes a newline in the name it shows in /proc/<pid>/status: no line can be forged
    name = "x\nUid:\t0\t0"
    code = (
        "import ctypes, sys, time; "
        f"ctypes.CDLL(None).prctl(15, ctypes.c_char_p({name.encode()!r}), 0, 0, 0); "
        "sys.stdout.write('ready\\n'); sys.stdout.flush(); time.sleep(30)"
    )
    python = "/usr/bin/python3"  # the host's: the project's venv is not readable by a sandbox uid
    child = subprocess.Popen([python, "-c", code], user=uid, group=uid, stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"ready\n"
        assert {p: u for p, u, _ in uids._proc_uids()}.get(child.pid) == uid
        assert child.pid in pids_of_uid(uid)
    finally:
        child.kill()
        child.wait()
    deadline = time.monotonic() + 5
    while pids_of_uid(uid, include_zombies=True):
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_the_recycled_slots_kept_are_bounded(private_slots, monkeypatch):
    monkeypatch.setattr(uids, "RECYCLED_MAX", 2)
    slots = [uids.acquire_uid_slot() for _ in range(3)]
    for slot in slots:
        uids.recycle_uid_slot(slot)
    assert slots[2].fd == -1 and not slots[2].path.exists()  # the third was given back
    assert [uids._take_recycled(private_slots) for _ in range(3)] == [slots[0], slots[1], None]
    for slot in slots[:2]:
        slot.release()


def test_the_own_root_unmount_takes_every_stacked_tmpfs_and_is_quiet_without_one(tmp_path):
    root = tmp_path / "t1-sbx-own"
    root.mkdir()
    mount_root(root, 4)
    mount_root(root, 4)  # a retried start stacks a second one
    assert mounted_roots(tmp_path).count(root) == 2
    unmount_own_root(root)
    assert root not in mounted_roots(tmp_path)
    unmount_own_root(root)  # nothing mounted there: quiet
    root.rmdir()
