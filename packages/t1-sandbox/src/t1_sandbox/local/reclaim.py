"""Reclaiming a local sandbox: kill its processes, delete its directories, give its uid slot back; never fail.

``Reclaimer`` is the reclaim side of ``LocalSandbox`` (a mixin). A reclaim runs in a worker thread (a sandbox
of 200,000 files must not stall the event loop and the other trials), its wait is shielded against any number
of cancellations (a second Ctrl-C), it is marked done only once everything is gone, and whatever is not done
at interpreter exit is retried there (`_reclaim_all`). The delete is `hostfs.remove_tree`: iterative, no
links followed, folders of mode 000 fixed. Sandboxes of a process killed with SIGKILL are reclaimed by its
watchdog (``t1_sandbox.watchdog``, armed by `sweep_stale`) as soon as it is gone, and otherwise
swept when a process starts its first sandbox in that work dir (`sweep_stale`).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from t1_sandbox.base import SandboxError
from t1_sandbox.local import hostfs
from t1_sandbox.local.process import killpg
from t1_sandbox.local.rootfs import release_root, resize_root, unmount_own_root
from t1_sandbox.local.spawner import SpawnedProcess
from t1_sandbox.local.uids import UidSlot, hold_if_free, kill_uid, recycle_uid_slot, sweep_stale_sandboxes
from t1_sandbox.watchdog import arm_local

if TYPE_CHECKING:
    from t1_sandbox.local.shell import LocalShell

__all__ = ["DIR_PREFIX", "LIVE", "Reclaimer", "reclaim_dead_owner", "sweep_stale"]

LIVE: set[Reclaimer] = set()  # strong references: an unclosed sandbox is still reclaimed at exit
DIR_PREFIX = "t1-sbx-"  # a sandbox's host directory: <work dir>/t1-sbx-<uid>-<pid>-<random>
_SWEPT: set[Path] = set()  # work dirs this process has swept of dead processes' sandboxes
_SWEEP_LOCK = threading.Lock()


@atexit.register
def _reclaim_all() -> None:
    """Reclaim every sandbox not yet fully reclaimed: the last resort, retried at interpreter exit.

    It covers an event loop torn down by Ctrl-C before ``__aexit__`` ran, and a reclaim that a second Ctrl-C
    cut short or that failed (a reclaim still running in a worker thread is waited for, then retried only if
    it did not finish). A failure is printed, never raised: the others are still reclaimed.
    """
    for sandbox in list(LIVE):
        try:
            sandbox._stop_processes()
            sandbox._reclaim()
        except Exception as exc:  # noqa: BLE001 - at exit, report and go on with the others
            print(f"t1: local sandbox {sandbox._root}: reclaim at exit failed: {exc}", file=sys.stderr)


def sweep_stale(parent: Path) -> list[Path]:
    """Reclaim in ``parent`` the sandboxes of processes that died without reclaiming them (once per process).

    A run killed with SIGKILL leaves its sandbox directories (and possibly processes) behind; the first
    sandbox a process starts in a work dir deletes them (`uids.sweep_stale_sandboxes`: a leftover is one
    whose uid slot no live process holds). Called before every start, it also arms this process's watchdog
    for ``parent`` (`t1_sandbox.watchdog.arm_local`), which reclaims this process's sandboxes there
    right after a ``kill -9`` of it, without waiting for a next process.

    Returns:
        The directories deleted (empty when ``parent`` was already swept by this process).
    """
    parent = Path(parent)
    arm_local(parent)  # before this process creates a sandbox there (idempotent)
    with _SWEEP_LOCK:
        if parent in _SWEPT:
            return []
        _SWEPT.add(parent)
    return sweep_stale_sandboxes(parent, DIR_PREFIX)


def reclaim_dead_owner(parent: Path, owner: int) -> list[Path]:
    """Reclaim the sandboxes the dead process ``owner`` left in ``parent``: its watchdog's call.

    Only directories named with ``owner``'s pid (``t1-sbx-<uid>-<owner>-...``) are looked at, each under its
    uid slot's lock (`uids.hold_if_free`): a slot some live process holds now is left alone. For each, the
    uid's processes are killed, its tmpfs unmounted and the directory deleted.

    Returns:
        The directories deleted; one that cannot be now (a process surviving SIGKILL, an I/O error) is left
        for a later sweep, never raised.
    """
    removed = []
    with contextlib.suppress(OSError):
        for path in sorted(Path(parent).glob(f"{DIR_PREFIX}*-{owner}-*")):
            uid_text, _, rest = path.name[len(DIR_PREFIX) :].partition("-")
            if not uid_text.isdigit() or rest.split("-", 1)[0] != str(owner):
                continue
            held = hold_if_free(int(uid_text))
            if held is None:
                continue
            try:
                if kill_uid(held.uid):
                    continue
                release_root(path)
                hostfs.remove_tree(path)
                removed.append(path)
            except OSError:
                continue
            finally:
                held.release()
    return removed


class Reclaimer:
    """The reclaim side of ``LocalSandbox``: stop, kill, delete, release; thread-safe and idempotent.

    A mixin: ``LocalSandbox`` holds the state (``_slot``, ``_root``, ``_mounts``, ``_shell``, ``_procs``,
    ``_closed``) and creates ``_reclaimed = False`` and ``_reclaim_lock`` in its constructor.
    """

    _slot: UidSlot | None
    _root: Path | None
    disk_mb: int
    _mounts: dict[str, Path]
    _workdir: str
    _shell: LocalShell | None
    _procs: set[SpawnedProcess]
    _closed: bool
    _reclaimed: bool
    _reclaim_lock: threading.Lock

    def _restore_verifier_folders(self) -> None:
        """Give ``/tmp``, ``/logs`` and a fresh ``/logs/verifier`` back to the sandbox uid, following no link.

        First the sandbox's tmpfs grows to twice ``disk_mb`` (`rootfs.resize_root`): the verifier has at least
        ``disk_mb`` MiB for the tests, its report and what the tests write, however full the agent left it.

        The mount folders themselves are the host's (their parent is never bound into the sandbox); what the
        agent left at ``/logs/verifier`` (a link to a host folder, a file, a 3,000-deep tree) is deleted with
        `hostfs.remove_entry` through a descriptor of ``/logs``, and the new folder is created there.
        """
        assert self._slot is not None
        uid = self._slot.uid
        if self._root is not None:
            # an agent that filled its disk must not make the tests' upload or the report fail (a dropped
            # trial in place of its 0): with no agent process left, the verifier gets disk_mb more room
            resize_root(self._root, 2 * self.disk_mb)
        for inner, mode in (("/tmp", 0o1777), ("/logs", 0o755)):
            host = self._mounts.get(inner)
            if host is not None:
                fd = os.open(host, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
                try:
                    os.fchown(fd, uid, uid)
                    os.fchmod(fd, mode)
                finally:
                    os.close(fd)
        logs = self._mounts.get("/logs")
        if logs is not None:
            fd = os.open(logs, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                hostfs.remove_entry(fd, "verifier")
                os.mkdir("verifier", 0o755, dir_fd=fd)
                os.chown("verifier", uid, uid, dir_fd=fd, follow_symlinks=False)
            finally:
                os.close(fd)
        self._restore_workdir_mode()

    def _restore_workdir_mode(self) -> None:
        """Give the WORKDIR (a folder of a writable mount) at least mode 0755 again, following no link.

        The agent owns it and may have made it unusable (``chmod 000 /app``): the verifier, which starts in
        it, could not, and the agent's doing would read as an infrastructure failure. Only the folder's own
        mode changes, never its contents; a WORKDIR the agent removed or replaced by a file or a link is left
        as it is (the verifier's launch then fails in the sandbox, on the agent, ``t1_rollout.verify``).
        """
        for mount in sorted(self._mounts, key=len, reverse=True):
            if self._workdir == mount or self._workdir.startswith(mount.rstrip("/") + "/"):
                parts = [p for p in self._workdir[len(mount) :].split("/") if p]
                break
        else:
            return  # outside the writable mounts: the agent cannot change it
        try:
            fd = hostfs.open_dir_inside(self._mounts[mount], parts, where="stop_agent")
        except (SandboxError, FileNotFoundError, NotADirectoryError, PermissionError):
            return  # removed or replaced (a file, a link, a locked parent): not followed
        try:
            os.fchmod(fd, (os.fstat(fd).st_mode & 0o7777) | 0o755)
        finally:
            os.close(fd)

    async def _reclaim_off_loop(self) -> None:
        """`_reclaim` in a worker thread, waited for through any number of cancellations (then re-raised)."""
        self._stop_processes()
        if self._reclaimed:
            return
        work = asyncio.ensure_future(asyncio.to_thread(self._reclaim))
        cancelled = False
        while not work.done():
            try:
                await asyncio.shield(work)
            except asyncio.CancelledError:
                if work.done() and work.cancelled():  # pragma: no cover - only the loop's shutdown does that
                    break
                cancelled = cancelled or not work.done()
        if cancelled:
            raise asyncio.CancelledError
        if not work.cancelled():
            work.result()

    def _stop_processes(self) -> None:
        """Refuse new launches and kill the shell and the running launchers (on the event loop's thread)."""
        self._closed = True
        if self._shell is not None:
            self._shell._kill()
        for proc in list(self._procs):
            killpg(proc.pid)

    def _reclaim(self) -> None:
        """Kill every process of the uid, delete the directories, release the slot; thread-safe, idempotent.

        Marked reclaimed only when all of it succeeded, so a failed or interrupted reclaim is retried.
        """
        with self._reclaim_lock:
            self._closed = True
            if self._reclaimed:
                return
            # the cgroup first: its members are killed and its removal proves none is left (process.py)
            emptied = self._release_cgroup()
            if self._slot is not None and not emptied:  # no cgroup to prove it: every process of the uid
                left = kill_uid(self._slot.uid)
                if left:  # pragma: no cover - a process that ignores SIGKILL (D state)
                    raise SandboxError(f"sandbox uid {self._slot.uid}: processes {left} survived SIGKILL")
            if self._root is not None:
                unmount_own_root(self._root)  # its tmpfs (rootfs.py): frees its files at once
                try:
                    hostfs.remove_tree(self._root)  # the mount point: empty once its tmpfs is gone
                except OSError as exc:
                    raise SandboxError(f"sandbox {self._root}: cannot delete {self._root}: {exc}") from exc
                self._root = None
            if self._slot is not None:
                if emptied and self._no_zombie_left():  # no process, no zombie of its uid: reused as is
                    recycle_uid_slot(self._slot)
                else:
                    self._slot.release()
            self._reclaimed = True
            LIVE.discard(self)
