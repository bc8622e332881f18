"""Per-sandbox host uids and the ``/proc`` sweeps that find and kill a sandbox's processes.

Each live local sandbox holds one unprivileged host uid (``UID_BASE + slot``), so ``RLIMIT_NPROC`` (counted
per real uid) is per sandbox and "every process of this sandbox" is "every process of this uid". These run as
the host user (root in CI) outside any sandbox.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from t1_sandbox.base import SandboxError
from t1_sandbox.local.hostfs import remove_tree
from t1_sandbox.local.rootfs import release_root

__all__ = [
    "UidSlot",
    "acquire_uid_slot",
    "recycle_uid_slot",
    "hold_if_free",
    "sweep_stale_sandboxes",
    "kill_tagged",
    "kill_uid",
    "pids_of_uid",
    "pids_of_uid_among",
    "pids_tagged",
]

# Host uids given to sandboxes: one per live sandbox, so RLIMIT_NPROC (counted per real uid) is per sandbox
# and "every process of this sandbox" is "every process of this uid".
UID_BASE = 200_000
UID_SLOTS = 4096
# One lock file per slot in use: it exists only while its slot is held (removed on release), so the directory
# holds about as many files as there are live sandboxes.
SLOT_DIR = Path("/tmp/t1-sandbox-slots")
_PRUNED: set[Path] = set()  # slot directories this process has already swept of unheld lock files
RECYCLED_MAX = 16  # held slots kept for this process's next sandboxes (`recycle_uid_slot`)
_RECYCLED: list[UidSlot] = []  # held, known free of processes and zombies; lowest uid first
_RECYCLED_OWNER = [os.getpid()]  # a fork's copy of the list is not its own: its locks are the parent's
_RECYCLE_LOCK = threading.Lock()


@dataclass
class UidSlot:
    """A host uid reserved for one sandbox, held by an exclusive ``flock`` on its slot file.

    Attributes:
        uid: the host uid (``UID_BASE + slot``).
        fd: the open, locked slot file (-1 once released).
        path: the slot file; removed on release.
    """

    uid: int
    fd: int
    path: Path | None = None
    recycled: bool = False
    """Handed out again by this process (`recycle_uid_slot`): its leftovers were swept when first taken."""

    def release(self) -> None:
        """Give the uid back and remove its lock file (idempotent).

        The file is unlinked while the lock is still held, and every acquirer checks after locking that the
        file it locked is still the one at the path (``_lock``), so removing it never lets two holders share
        a slot.
        """
        if self.fd >= 0:
            if self.path is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)
            os.close(self.fd)  # closing drops the flock
            self.fd = -1


def _lock(path: Path) -> int | None:
    """Open ``path`` (creating it) and take its exclusive ``flock`` without blocking.

    Returns:
        The locked descriptor, or None when another holder has it. A file unlinked (released) between the
        open and the lock is detected by comparing inodes and the lock is retried on a fresh file.
    """
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            on_disk = os.stat(path)
        except FileNotFoundError:
            on_disk = None
        held = os.fstat(fd)
        if on_disk is not None and (on_disk.st_dev, on_disk.st_ino) == (held.st_dev, held.st_ino):
            return fd
        os.close(fd)  # we locked a released (unlinked) file: the slot must be taken on the new one


def _prune_slot_files(directory: Path) -> None:
    """Remove the unheld lock files in ``directory``, once per process and directory.

    Older versions never removed a slot's file; they are swept under the same lock-then-check protocol.
    """
    if directory in _PRUNED:
        return
    _PRUNED.add(directory)
    for path in directory.glob("*.lock"):
        fd = _lock(path)
        if fd is not None:
            UidSlot(uid=-1, fd=fd, path=path).release()


def acquire_uid_slot() -> UidSlot:
    """Reserve the lowest free sandbox uid (``UID_BASE + slot``), killing any stale process of it.

    Slots are reused lowest first and a slot's lock file is removed on release, so ``SLOT_DIR`` holds about
    one file per live sandbox. A slot whose uid still has zombies (a sandbox just released whose processes
    the event loop has not reaped yet) is skipped: zombies count against the next sandbox's RLIMIT_NPROC.

    Returns:
        The held ``UidSlot``; call ``release`` when the sandbox is reclaimed.

    Raises:
        SandboxError: running as non-root (the uid switch needs root), or all ``UID_SLOTS`` slots are taken.
    """
    if os.geteuid() != 0:
        raise SandboxError(
            "the local sandbox must be started as root: it runs each sandbox under its own "
            "unprivileged host uid so that process limits apply per sandbox"
        )
    directory = SLOT_DIR
    if (recycled := _take_recycled(directory)) is not None:
        return recycled
    directory.mkdir(mode=0o700, exist_ok=True)
    _prune_slot_files(directory)
    # One /proc scan per slot locked, taken after the lock (no process of a locked uid can appear after it:
    # only the slot's holder launches under it). The uids with zombies it saw are skipped without a lock, so
    # a run of recently released slots (zombies waiting for init, which can take seconds) costs one scan.
    zombie_uids: set[int] = set()
    for slot in range(UID_SLOTS):
        if UID_BASE + slot in zombie_uids:
            continue
        path = directory / f"{slot}.lock"
        fd = _lock(path)
        if fd is None:
            continue
        held = UidSlot(uid=UID_BASE + slot, fd=fd, path=path)
        seen = list(_proc_uids())
        zombie_uids |= {uid for _, uid, state in seen if state == b"Z"}
        procs = [pid for pid, uid, _ in seen if uid == held.uid]
        # Leftovers of a process that died without reclaiming are killed: a uid is never handed out while a
        # process of it is alive (it would count against the new sandbox's RLIMIT_NPROC, be killed by its
        # close and could be mistaken for one of its processes). A survivor of SIGKILL (D state) or a zombie
        # keeps the slot out of use for now.
        if procs and (any(_is_zombie(pid) for pid in procs) or kill_uid(held.uid)):
            held.release()
            continue
        return held
    raise SandboxError(f"all {UID_SLOTS} local sandbox uid slots are in use")


def recycle_uid_slot(slot: UidSlot) -> None:
    """Keep ``slot`` held for this process's next sandbox: `acquire_uid_slot` hands it out again at once.

    Only for a slot whose uid has no process and no zombie left, which the caller has proved (the local
    sandbox: its cgroup, which every process of the uid had to join, was removed empty, and every launch of
    it was reaped by the launch server after exiting by itself). The lock stays held, so no other process can
    take the slot meanwhile and no process of its uid can appear (only the holder launches under it): the
    ``/proc`` scan of `acquire_uid_slot` has nothing to find. At most `RECYCLED_MAX` are kept; past that, or
    in a forked child, the slot is released as usual. The kernel drops the locks when this process exits.
    """
    with _RECYCLE_LOCK:
        if slot.fd < 0 or _RECYCLED_OWNER[0] != os.getpid() or len(_RECYCLED) >= RECYCLED_MAX:
            keep = False
        else:
            _RECYCLED.append(slot)
            _RECYCLED.sort(key=lambda held: held.uid)
            keep = True
    if not keep:
        slot.release()


def _take_recycled(directory: Path) -> UidSlot | None:
    """The lowest recycled slot of ``directory`` in the current uid range (None: none kept)."""
    with _RECYCLE_LOCK:
        if _RECYCLED_OWNER[0] != os.getpid():  # a fork: the parent's locks, never ours to hand out
            _RECYCLED.clear()
            _RECYCLED_OWNER[0] = os.getpid()
            return None
        # slots of another slot folder or uid range (the settings changed since) are given back
        stale = [s for s in _RECYCLED if s.path is None or s.path.parent != directory]
        stale += [s for s in _RECYCLED if not 0 <= s.uid - UID_BASE < UID_SLOTS and s not in stale]
        for held in stale:
            _RECYCLED.remove(held)
            held.release()
        if not _RECYCLED:
            return None
        held = _RECYCLED.pop(0)
        held.recycled = True
        return held


def hold_if_free(uid: int) -> UidSlot | None:
    """Take the slot of the sandbox uid ``uid`` when no live process holds it (None: held, or no slot).

    The kernel drops a dead holder's lock, so a slot taken here belongs to no live sandbox: what its uid
    still runs, and the directories named with it, are leftovers. ``release`` it when done.
    """
    return _hold_if_free(uid)


def _hold_if_free(uid: int) -> UidSlot | None:
    """Take the slot of ``uid`` when no live process holds it (the kernel drops a dead holder's lock)."""
    slot = uid - UID_BASE
    if not 0 <= slot < UID_SLOTS:
        return None
    SLOT_DIR.mkdir(mode=0o700, exist_ok=True)
    path = SLOT_DIR / f"{slot}.lock"
    fd = _lock(path)
    return None if fd is None else UidSlot(uid=uid, fd=fd, path=path)


def sweep_stale_sandboxes(parent: Path, prefix: str) -> list[Path]:
    """Kill the processes and delete the directories of sandboxes whose owning process is dead.

    A sandbox's directory (``parent/<prefix><uid>-<pid>-...``) and processes exist only while its owner holds
    the uid's slot lock; the kernel drops the lock when the owner dies, even by SIGKILL. So a directory or a
    process of a sandbox uid whose slot can be locked now is a leftover: it is reclaimed under that lock, so
    no sandbox starting meanwhile can take the slot. A slot held by a live process (this one's included) is
    left alone, whatever its pid says.

    Args:
        parent: the folder holding sandbox directories (the sandboxes' work dir).
        prefix: the directories' name prefix, followed by the uid and a ``-``.

    Returns:
        The directories deleted. A leftover that cannot be deleted now (a process surviving SIGKILL, an I/O
        error) is kept for a later sweep and never raises.
    """
    by_uid: dict[int, list[Path]] = {}
    with contextlib.suppress(OSError):
        for path in parent.glob(prefix + "*"):
            uid_text = path.name[len(prefix) :].split("-", 1)[0]
            if uid_text.isdigit() and 0 <= int(uid_text) - UID_BASE < UID_SLOTS:
                by_uid.setdefault(int(uid_text), []).append(path)
    for uid in _uids_in_range():
        by_uid.setdefault(uid, [])
    removed = []
    for uid, paths in sorted(by_uid.items()):
        held = _hold_if_free(uid)
        if held is None:
            continue
        try:
            if kill_uid(uid):  # a survivor of SIGKILL (D state): try again another time
                continue
            for path in paths:
                try:
                    release_root(path)  # a sandbox's own tmpfs (rootfs.py), if mounted there
                    remove_tree(path)
                except OSError:
                    continue
                removed.append(path)
        finally:
            held.release()
    return removed


def _status_field(status: bytes, name: bytes) -> bytes | None:
    """The first word of the line ``name:`` of a ``/proc/<pid>/status`` text (None when absent)."""
    at = status.find(b"\n" + name + b":")
    if at < 0:
        return None
    words = status[at + len(name) + 2 : status.find(b"\n", at + 1)].split()
    return words[0] if words else None


def _proc_uids() -> Iterator[tuple[int, int, bytes | None]]:
    """``(pid, real uid, state letter)`` of every process in ``/proc`` (one pass; vanished ones skipped).

    Each ``status`` file is read with one ``read`` (its ``State:`` and ``Uid:`` lines sit in the first
    kilobyte): the scan runs at every slot taken and every sweep, so no buffered file object per process.
    """
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fd = os.open(f"/proc/{entry}/status", os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        try:
            status = os.read(fd, 4096)
        except (ProcessLookupError, PermissionError):  # the process went away between open and read
            continue
        finally:
            os.close(fd)
        uid = _status_field(status, b"Uid")
        if uid is not None:
            yield int(entry), int(uid), _status_field(status, b"State")


def _uids_in_range() -> set[int]:
    """Real uids of processes (zombies included) that are sandbox uids (one pass over ``/proc``)."""
    return {uid for _, uid, _ in _proc_uids() if 0 <= uid - UID_BASE < UID_SLOTS}


def pids_of_uid_among(pids: list[int], uid: int) -> list[int]:
    """Those of ``pids`` whose real uid is ``uid``, zombies included (only their ``status`` files read)."""
    found = []
    for pid in pids:
        try:
            fd = os.open(f"/proc/{pid}/status", os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        try:
            owner = _status_field(os.read(fd, 4096), b"Uid")
        except (ProcessLookupError, PermissionError):
            continue
        finally:
            os.close(fd)
        if owner is not None and int(owner) == uid:
            found.append(pid)
    return found


def pids_of_uid(uid: int, *, include_zombies: bool = False) -> list[int]:
    """Host pids whose real uid is ``uid`` (read from ``/proc/<pid>/status``); zombies only if asked."""
    return [
        pid for pid, owner, _ in _proc_uids() if owner == uid and (include_zombies or not _is_zombie(pid))
    ]


def kill_uid(uid: int, *, deadline_s: float = 5.0) -> list[int]:
    """SIGKILL every process of ``uid`` until none remains (or the deadline passes).

    Returns:
        The pids still alive at the deadline (zombies awaiting their parent count as gone).
    """
    end = time.monotonic() + deadline_s
    while True:
        alive = pids_of_uid(uid)
        if not alive or time.monotonic() > end:
            return alive
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)


def _argv0(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().split(b"\0", 1)[0]
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return b""


def pids_tagged(uid: int, tag: str) -> list[int]:
    """Live host pids of ``uid`` whose ``argv[0]`` is ``tag`` (zombies excluded).

    Every ``bwrap`` the local sandbox starts gets a unique ``argv[0]``; the sandbox's pid 1 is a fork of the
    launcher without an exec, so both carry it, and killing that pid 1 kills its whole pid namespace.
    """
    want = tag.encode()
    return [pid for pid in pids_of_uid(uid) if _argv0(pid) == want]


def kill_tagged(uid: int, tag: str, *, also: tuple[int, ...] = (), deadline_s: float = 5.0) -> list[int]:
    """SIGKILL the processes of ``uid`` tagged ``tag`` (one ``bwrap`` launch) until none remains.

    This reaches the sandbox's pid 1 even when it is orphaned: bwrap arms ``--die-with-parent`` in pid 1 only
    after its set-up, so a launcher killed during the set-up leaves pid 1 behind (blocked on its launcher or
    running the command), reparented to init and possibly in a session of its own (``--new-session``), out of
    reach of the launcher's process group.

    Args:
        uid: the sandbox's host uid.
        tag: the launch's ``argv[0]``.
        also: pids to kill and follow as well (the launcher, which may already be exiting, its command line
            gone, when the sweep starts).
        deadline_s: seconds to keep killing; 0 sweeps once.

    Returns:
        The pids still alive at the deadline (zombies count as gone).
    """
    end = time.monotonic() + deadline_s
    killed: set[int] = set(also)
    while True:
        # An exiting process loses its command line before it becomes a zombie, so the pids killed so far are
        # followed by pid (and uid) until they are zombies or gone, not found again by their tag.
        alive = set(pids_tagged(uid, tag)) | {pid for pid in killed if _alive_as(pid, uid)}
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        killed |= alive
        if not alive:
            return []
        if time.monotonic() > end:
            return sorted(pid for pid in killed if _alive_as(pid, uid))
        time.sleep(0.005)


def _alive_as(pid: int, uid: int) -> bool:
    """Whether ``pid`` exists, is not a zombie and runs as ``uid`` (guards against pid reuse)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"Uid:"):
                    return int(line.split()[1]) == uid and not _is_zombie(pid)
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return False


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
