"""The sandbox watchdog: a small process that outlives its owner's ``kill -9`` and reclaims its sandboxes.

A process that dies by SIGKILL runs no handler and no ``atexit``: its Docker containers (with the agents'
processes in them) and its local sandboxes' directories, tmpfs mounts, cgroups and processes would stay until
the next process sweeps them. So the first sandbox a process starts also starts its watchdog
(`arm_local`, `arm_docker`): ``python -m t1_sandbox.watchdog PID START``, in a session of its own
(a signal to the owner's process group or terminal does not reach it), holding nothing of the owner's but a
pipe on which the owner names, before it creates anything there, the work dirs of its local sandboxes (with
their uid range and slot folder) and the Docker daemons of its containers.

The watchdog waits for its owner's exit with a pidfd (``pidfd_open``: woken by the exit itself, so neither a
pid reused later nor a copy of the pipe left in a child can mislead it), or where there is none by polling
the owner's start time in ``/proc`` every half second. When the owner is gone, whatever the way (a normal
exit included, when there is normally nothing left), it reclaims:

- in each named work dir, the owner's local sandboxes (directories named with its pid) whose uid slot no
  live process holds (``reclaim.reclaim_dead_owner``: their processes killed, tmpfs unmounted, directories
  deleted), then the cgroups whose creating process is dead (``cgroups.sweep_dead_cgroups``);
- on each named daemon, the containers labelled with the owner's pid and start time
  (``client.reclaim_owner``).

Then it exits. Why a watchdog and not a container that watches its owner: the local sandbox's directories,
mounts and cgroups are on the host and need a host process anyway, and one mechanism for both backends is
one to test; a container's pid 1 cannot see a host pid, and a pipe held through the daemon's attach stream
would tie the container's life to one HTTP connection of the driver. What stays open: a watchdog killed too
(``kill -9`` of both, the OOM killer, a cgroup-wide kill of the job) leaves the leftovers to the next
process's sweep, as before. Source: Linux ``pidfd_open(2)``; T1 §6 (every sandbox is reclaimed).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["arm_docker", "arm_local", "main", "process_start_ticks", "reap", "watchdog_pid"]

_LOCK = threading.Lock()
_PROC: subprocess.Popen | None = None
_OWNER = 0  # the pid that started `_PROC` (a forked child starts its own)
_SENT: set[str] = set()
POLL_S = 0.5


def process_start_ticks(pid: int) -> str:
    """Field 22 of ``/proc/<pid>/stat`` (start time in clock ticks), ``""`` for a zombie or no process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return ""
    return "" if fields[0] in (b"Z", b"X") else fields[19].decode()


def _send(message: dict[str, Any]) -> None:
    """Give ``message`` to this process's watchdog, starting it first; never raises (a warning instead)."""
    global _PROC, _OWNER
    line = json.dumps(message, sort_keys=True)
    with _LOCK:
        me = os.getpid()
        if _OWNER != me:  # first use, or a forked child of the process that started it
            _PROC, _OWNER = None, me
            _SENT.clear()
        if _PROC is not None and _PROC.poll() is not None:  # it was killed: a new one, told anew
            _PROC = None  # each work dir and daemon is named again at its next sandbox's start
            _SENT.clear()
        if line in _SENT:
            return
        try:
            if _PROC is None:
                _PROC = subprocess.Popen(
                    [sys.executable, "-m", "t1_sandbox.watchdog", str(me), process_start_ticks(me)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,  # a test reading the owner's stderr must see EOF when it dies
                    start_new_session=True,
                    close_fds=True,
                    cwd="/",
                )
            assert _PROC.stdin is not None
            _PROC.stdin.write((line + "\n").encode())
            _PROC.stdin.flush()
            _SENT.add(line)
        except OSError as exc:
            print(
                f"t1: sandbox watchdog: cannot start or reach it ({exc}); after a kill -9 of this "
                "process its sandboxes are swept by the next process instead",
                file=sys.stderr,
            )


def arm_local(parent: Path) -> None:
    """Have the watchdog reclaim this process's local sandboxes under ``parent`` once it is gone.

    Call before the first sandbox directory is created in ``parent``: the uid range and slot folder in use
    now (``uids.UID_BASE``, ``UID_SLOTS``, ``SLOT_DIR``) are sent with it.
    """
    from t1_sandbox.local import uids

    _send(
        {
            "local": str(Path(parent).resolve()),
            "uid_base": uids.UID_BASE,
            "uid_slots": uids.UID_SLOTS,
            "slot_dir": str(uids.SLOT_DIR),
        }
    )


def arm_docker(host: str | None) -> None:
    """Have the watchdog remove this process's containers on the daemon ``host`` once it is gone."""
    _send({"docker": host})


def watchdog_pid() -> int | None:
    """The pid of this process's watchdog (None when none was started)."""
    with _LOCK:
        return _PROC.pid if _PROC is not None and _OWNER == os.getpid() else None


def reap(owner: int, start: str, registrations: list[dict[str, Any]]) -> list[str]:
    """Reclaim what the dead process ``owner`` (started at ``start`` ticks) left, as `registrations` name.

    Returns:
        One line per failure (empty: everything named was reclaimed); never raises.
    """
    failures: list[str] = []
    local = [r for r in registrations if "local" in r]
    if local:
        try:
            from t1_sandbox.local import cgroups, reclaim, uids

            for reg in local:
                uids.UID_BASE, uids.UID_SLOTS = int(reg["uid_base"]), int(reg["uid_slots"])
                uids.SLOT_DIR = Path(reg["slot_dir"])
                reclaim.reclaim_dead_owner(Path(reg["local"]), owner)
                left = Path(reg["local"]).glob(f"{reclaim.DIR_PREFIX}*-{owner}-*")
                failures += [
                    f"{path}: not reclaimed (its slot is held, or a process survived)" for path in left
                ]
            failures += [f"cgroup {g} could not be removed" for g in cgroups.sweep_dead_cgroups()]
        except Exception as exc:  # noqa: BLE001 - report and go on with the daemons
            failures.append(f"local sandboxes: {type(exc).__name__}: {exc}")
    for reg in registrations:
        if "docker" in reg:
            try:
                from t1_sandbox.docker import client

                client.reclaim_owner(owner, start, reg["docker"])
            except Exception as exc:  # noqa: BLE001 - one daemon's failure does not stop the others
                failures.append(f"docker containers on {reg['docker'] or 'the default daemon'}: {exc}")
    return failures


def _wait_for_exit(owner: int, start: str) -> None:
    """Return once ``owner`` has exited (pidfd where the kernel has it, else polling its start time)."""
    if not start or process_start_ticks(owner) != start:
        return
    try:
        fd = os.pidfd_open(owner)
    except (OSError, AttributeError):
        fd = -1
    if fd >= 0 and process_start_ticks(owner) != start:  # the pid was reused before the pidfd was taken
        os.close(fd)
        return
    while True:
        if fd >= 0:
            ready, _, _ = select.select([fd], [], [], 5.0)
            if ready:
                os.close(fd)
                return
        else:
            time.sleep(POLL_S)
        if process_start_ticks(owner) != start:
            return


def main(argv: list[str]) -> int:
    """``python -m t1_sandbox.watchdog OWNER_PID OWNER_START``: wait for the owner, then `reap`."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    owner, start = int(argv[0]), argv[1]
    registrations: list[dict[str, Any]] = []
    closed = threading.Event()

    def read() -> None:
        for raw in sys.stdin.buffer:
            try:
                registrations.append(json.loads(raw))
            except ValueError:
                continue
        closed.set()

    threading.Thread(target=read, daemon=True).start()
    _wait_for_exit(owner, start)
    closed.wait(2.0)  # what the owner wrote before it died is still in the pipe: read it first
    failures = reap(owner, start, list(registrations))
    if failures:
        import tempfile

        log = Path(tempfile.gettempdir()) / f"t1-watchdog-{owner}.log"
        log.write_text("".join(f"{line}\n" for line in failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
