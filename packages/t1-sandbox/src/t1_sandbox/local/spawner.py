"""The client of the launch server (``spawnd.py``): launches that never fork this (large) process.

`spawner` returns this process's `Spawner`, starting the server on first use (or earlier, by
`start_spawner`: a run calls it before it builds the model). `Spawner.spawn` sends one launch (its
descriptors by ``SCM_RIGHTS``, its set-up as JSON) and returns a `SpawnedProcess` once the child has exec'd;
the fork, the set-up (cgroup, session, limits, uid switch) and the exec run in the server, and nothing of a
launch blocks the caller's event loop beyond a few non-blocking socket calls.

The server is started with ``posix_spawn``-like ``subprocess`` (no ``preexec_fn``: no copy of this process's
page tables) in a session of its own (Ctrl-C at the terminal is this process's to handle), and dies with
this process: the control socket's end-of-file, and the parent-death signal when started from the main
thread. A server that died is replaced at the next launch; the launches it had running were killed with it
(bwrap's ``--die-with-parent``) and their waits return a negative exit status.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from t1_sandbox.base import SandboxError

__all__ = ["SpawnedProcess", "Spawner", "spawner", "start_spawner"]

SERVER = Path(__file__).with_name("spawnd.py")
HEADER_SIZE = 8  # spawnd.HEADER: the request's length, big-endian
_LOCK = threading.Lock()
_SPAWNER: Spawner | None = None


class SpawnedProcess:
    """A process the server started: its pid, and its exit status once the server reports it.

    The parts of ``asyncio.subprocess.Process`` the sandbox uses: ``pid``, ``returncode`` (None while it
    runs; set from the event loop as soon as the server reports the exit, even if nobody waits), `wait`,
    and ``stdin`` / ``stdout`` / ``stderr`` (set by the caller when it made pipes, else None).
    """

    def __init__(self, pid: int, conn: socket.socket, received: bytes = b"") -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.stdin: asyncio.StreamWriter | None = None
        self.stdout: asyncio.StreamReader | None = None
        self.stderr: asyncio.StreamReader | None = None
        self._conn = conn
        self._buffer = received  # what came after the pid line (the exit line of a quick process)
        self._loop = asyncio.get_running_loop()
        self._exited: asyncio.Future[int] = self._loop.create_future()
        self._loop.add_reader(conn.fileno(), self._on_readable)

    def _on_readable(self) -> None:
        try:
            data = self._conn.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        self._buffer += data
        if b"\n" in self._buffer:
            self._finish(int(json.loads(self._buffer.split(b"\n", 1)[0])["exit"]))
        elif not data:  # the server died without reporting: its children died with it (die-with-parent)
            self._finish(-9)

    def _finish(self, code: int) -> None:
        self._loop.remove_reader(self._conn.fileno())
        self._conn.close()
        self.returncode = code
        if not self._exited.done():
            self._exited.set_result(code)

    async def wait(self) -> int:
        """Wait until the process exited; its exit code (negative: killed by that signal)."""
        return await asyncio.shield(self._exited)


class Spawner:
    """One launch server and the socket to it; use `spawner` rather than building one.

    Raises:
        SandboxError: the server could not be started (names the interpreter and the error).
    """

    def __init__(self) -> None:
        self.owner = os.getpid()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = [sys.executable, "-I", "-S", str(SERVER), str(theirs.fileno()), str(self.owner)]
        if threading.current_thread() is threading.main_thread():
            argv.append("--pdeathsig")  # the signal follows the thread that started it: only the main one
        try:
            self.proc = subprocess.Popen(
                argv,
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
                env={},
            )
        except OSError as exc:
            ours.close()
            raise SandboxError(
                f"cannot start the sandbox launch server ({sys.executable} {SERVER}): {exc}"
            ) from exc
        finally:
            theirs.close()
        self._control = ours
        self._send_lock = threading.Lock()

    @property
    def alive(self) -> bool:
        """Whether the server still runs (and belongs to this process, not to a fork of it)."""
        return self.owner == os.getpid() and self.proc.poll() is None

    def children(self) -> list[int] | None:
        """The server's children not reaped yet: launchers and the sandboxes' orphaned pid 1 (None: unknown).

        Read from ``/proc/<pid>/task/<pid>/children`` (the server is single-threaded); None where the kernel
        does not offer that file or the server is gone.
        """
        try:
            with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children", "rb") as fh:
                return [int(pid) for pid in fh.read().split()]
        except (OSError, ValueError):
            return None

    def close(self) -> None:
        """End the server (its children are killed) and wait for it; idempotent."""
        self._control.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)

    def _died(self, doing: str) -> SandboxError:
        code = self.proc.poll()
        state = "is still running" if code is None else f"exited with status {code}"
        return SandboxError(f"the sandbox launch server (pid {self.proc.pid}) {state} while {doing}")

    async def spawn(
        self,
        argv: Sequence[str],
        *,
        executable: str,
        fds: Sequence[int],
        uid: int,
        cgroup_procs: Sequence[str] = (),
        rlimits: Sequence[tuple[int, int, int]] = (),
        tty: bool = False,
        env: dict[str, str] | None = None,
    ) -> SpawnedProcess:
        """Start ``argv`` through the server, as ``uid``, in a new session; return once it has exec'd.

        Args:
            argv: the command line; ``argv[0]`` is what the process is called (the launch's tag).
            executable: the program to run.
            fds: the child's descriptors in order (``fds[i]`` becomes its ``i``); the caller keeps and
                closes its own copies.
            uid: the host uid (and gid) it runs as, with no supplementary groups.
            cgroup_procs: ``cgroup.procs`` files the child joins first, as root.
            rlimits: ``(resource, soft, hard)`` set before the uid switch.
            tty: make descriptor 0 (a terminal) its controlling terminal.
            env: its whole environment (default: none at all).

        Returns:
            The running process; its exit is reported to the calling event loop.

        Raises:
            SandboxError: the server refused or could not start it (the message names the failed step,
                e.g. joining the cgroup, the uid switch, the exec), or the server died.
        """
        body = json.dumps(
            {
                "argv": list(argv),
                "executable": executable,
                "fds": len(fds),
                "uid": uid,
                "cgroup_procs": list(cgroup_procs),
                "rlimits": [list(r) for r in rlimits],
                "tty": tty,
                "env": dict(env or {}),
            }
        ).encode()
        loop = asyncio.get_running_loop()
        conn, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.setblocking(False)
            header = len(body).to_bytes(HEADER_SIZE, "big")
            conn.sendmsg([header], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
            try:
                with self._send_lock:
                    self._control.sendmsg(
                        [b"L"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [theirs.fileno()]))]
                    )
            except OSError as exc:
                raise self._died(f"taking a launch ({exc})") from exc
            finally:
                theirs.close()
            await loop.sock_sendall(conn, body)
            line, rest = await _read_line(loop, conn)
        except BaseException:
            conn.close()  # the server kills a child whose connection is gone
            raise
        if not line:
            conn.close()
            raise self._died(f"starting {executable} (no answer)")
        answer = json.loads(line)
        if "pid" not in answer:
            conn.close()
            raise SandboxError(f"sandbox launch of {executable} failed: {answer.get('error', answer)}")
        return SpawnedProcess(int(answer["pid"]), conn, rest)


async def _read_line(loop: asyncio.AbstractEventLoop, conn: socket.socket) -> tuple[bytes, bytes]:
    """The server's first answer line and what came after it (``b""`` line: end-of-file before it)."""
    data = b""
    while b"\n" not in data:
        chunk = await loop.sock_recv(conn, 4096)
        if not chunk:
            return b"", b""
        data += chunk
    line, rest = data.split(b"\n", 1)
    return line, rest


def spawner() -> Spawner:
    """This process's launch server, started (again) when it is not running; thread-safe.

    Raises:
        SandboxError: the server could not be started.
    """
    global _SPAWNER
    with _LOCK:
        if _SPAWNER is None or not _SPAWNER.alive:
            _SPAWNER = Spawner()
        return _SPAWNER


def start_spawner() -> None:
    """Start the launch server now, while this process is still small (before a run builds its model).

    Raises:
        SandboxError: the server could not be started.
    """
    spawner()
