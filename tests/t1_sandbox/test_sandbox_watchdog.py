"""The sandbox watchdog: it wakes when its owner exits (not before), and reclaims only its owner's sandboxes.

The end-to-end check (a real driver with running sandboxes, SIGKILLed, on local and Docker) is the leak
suite's ``test_after_kill_9_the_watchdog_reclaims_the_dead_drivers_sandboxes``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from t1_sandbox import watchdog
from t1_sandbox.local import uids

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="sandbox uids need root")

OWNER = """
import os, sys, time
from pathlib import Path
from t1_sandbox.local import uids
uids.UID_BASE, uids.UID_SLOTS, uids.SLOT_DIR = int(sys.argv[1]), 8, Path(sys.argv[2])
slot = uids.acquire_uid_slot()
root = Path(sys.argv[3]) / f"t1-sbx-{slot.uid}-{os.getpid()}-x"
(root / "app").mkdir(parents=True)
(root / "app" / "f").write_text("x")
r, w = os.pipe()  # close-on-exec: EOF once the child has exec'd and so dropped the slot lock's descriptor
if os.fork() == 0:  # a process of the sandbox's uid, as an agent's would be
    os.setsid()
    os.setgid(slot.uid)
    os.setuid(slot.uid)
    os.execvp("sleep", ["sleep", "600"])
os.close(w)
os.read(r, 1)
print(slot.uid, flush=True)
time.sleep(600)
"""


def _wait_in_thread(pid: int, start: str) -> threading.Thread:
    worker = threading.Thread(target=watchdog._wait_for_exit, args=(pid, start), daemon=True)
    worker.start()
    return worker


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "polling"])
def test_the_wait_ends_when_the_owner_exits_and_not_before(monkeypatch, pidfd):
    if not pidfd:
        monkeypatch.setattr(os, "pidfd_open", lambda pid: (_ for _ in ()).throw(OSError("none here")))
    proc = subprocess.Popen(["sleep", "600"])
    try:
        worker = _wait_in_thread(proc.pid, watchdog.process_start_ticks(proc.pid))
        worker.join(1.0)
        assert worker.is_alive(), "the watchdog woke while its owner was still running"
        proc.kill()  # a zombie until reaped below: already gone for the watchdog
        worker.join(10.0)
        assert not worker.is_alive()
    finally:
        proc.kill()
        proc.wait()


def test_a_pid_reused_by_another_process_is_not_taken_for_the_owner():
    worker = _wait_in_thread(os.getpid(), "1")  # this pid, but not started at tick 1
    worker.join(5.0)
    assert not worker.is_alive()


@needs_root
def test_reap_reclaims_the_dead_owners_sandbox_and_leaves_a_live_ones(tmp_path, monkeypatch):
    base = 340_000 + (os.getpid() % 500) * 16
    slots, work = tmp_path / "slots", tmp_path / "work"
    work.mkdir()
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(base), str(slots), str(work)], stdout=subprocess.PIPE, text=True
    )
    uid = int(owner.stdout.readline())
    start = watchdog.process_start_ticks(owner.pid)
    # a live sandbox of this process in the same work dir and uid range: not the dead owner's
    monkeypatch.setattr(uids, "UID_BASE", base)
    monkeypatch.setattr(uids, "UID_SLOTS", 8)
    monkeypatch.setattr(uids, "SLOT_DIR", slots)
    mine = uids.acquire_uid_slot()
    live = work / f"t1-sbx-{mine.uid}-{os.getpid()}-y"
    live.mkdir()
    try:
        owner.kill()
        owner.wait(timeout=30)
        assert uids.pids_of_uid(uid), "the owner's sandbox process should outlive it"
        registration = {"local": str(work), "uid_base": base, "uid_slots": 8, "slot_dir": str(slots)}
        watchdog.reap(owner.pid, start, [registration])
        assert not list(work.glob(f"t1-sbx-*-{owner.pid}-*"))
        end = time.monotonic() + 10
        while uids.pids_of_uid(uid) and time.monotonic() < end:
            time.sleep(0.05)
        assert not uids.pids_of_uid(uid)
        assert live.is_dir()
    finally:
        mine.release()
        uids.kill_uid(uid)


def test_a_killed_watchdog_is_replaced_at_the_next_sandbox_start(tmp_path):
    watchdog.arm_local(tmp_path)
    first = watchdog.watchdog_pid()
    assert first is not None
    os.kill(first, 9)
    end = time.monotonic() + 10
    while watchdog._PROC.poll() is None and time.monotonic() < end:
        time.sleep(0.05)
    watchdog.arm_local(tmp_path)  # the same work dir: named again to the new watchdog
    second = watchdog.watchdog_pid()
    assert second not in (None, first) and watchdog.process_start_ticks(second)
