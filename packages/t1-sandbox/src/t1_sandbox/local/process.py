"""Process launch and kill for the local sandbox: limits, the uid switch, one ``bwrap`` launch to completion.

Every launch is forked and exec'd by the launch server (``spawner.py``, ``spawnd.py``), a small process, never
by this one: forking a trainer of gigabytes for each launch stalled it. Limits come in two lines. The first is
per sandbox: every launch joins the sandbox's cgroup (``cgroups.py``: memory including tmpfs, processes, CPU
share) in the forked child before ``exec``, and the sandbox's files live on a tmpfs of ``disk_mb`` MiB
(``rootfs.py``). The second is per process: ``RLIMIT_CPU``, ``RLIMIT_AS``, ``RLIMIT_FSIZE`` and
``RLIMIT_NPROC`` (per host uid, i.e. per sandbox). Every launch also gets the seccomp filter (``seccomp.py``)
on a pipe that ``bwrap --seccomp`` reads.

Every launch runs under a unique ``argv[0]`` tag, so that its processes can be found and killed even when the
launcher died during bubblewrap's set-up (`kill_tagged`). A launch is safe to cancel at any point: on
cancellation, error or deadline its processes are killed before the exception propagates, and the command is
never waited for.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import secrets
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from t1_sandbox.base import SandboxError
from t1_sandbox.local.cgroups import SandboxCgroup
from t1_sandbox.local.rootfs import mount_root, mounted_roots, release_root
from t1_sandbox.local.seccomp import seccomp_program
from t1_sandbox.local.spawner import SpawnedProcess, Spawner, spawner
from t1_sandbox.local.uids import UidSlot, kill_tagged, pids_of_uid_among

__all__ = ["LAUNCH_ENV", "MAX_EXEC_OUTPUT", "Launcher", "kill_launch", "killpg", "off_loop"]

MAX_EXEC_OUTPUT = 8 * 1024 * 1024  # bytes kept per stream of one exec
#: The whole environment of the ``bwrap`` process itself: nothing of the host's (the trainer's tokens).
LAUNCH_ENV: dict[str, str] = {}


class Launcher:
    """The process side of ``LocalSandbox``: per-process limits, the uid switch and one ``bwrap`` launch.

    A mixin: ``LocalSandbox`` sets the limits, the held uid slot (``_slot``), its host directory (``_root``),
    whether it is closed (``_closed``), the set of running launchers (``_procs``, killed by ``stop_agent`` and
    ``close``), ``_cgroup`` (None until the first launch creates it), the launches not known to have exited
    by themselves (``_launched``), the launch server that made them (``_server``) and whether a launch was
    cut short or made by another server (``_launch_unclean``).
    """

    cpu_time_s: float
    memory_mb: int
    max_processes: int
    disk_mb: int
    cpus: float
    _slot: UidSlot | None
    _root: Path | None
    _closed: bool
    _procs: set[SpawnedProcess]
    _cgroup: SandboxCgroup | None
    _launched: list[SpawnedProcess]
    _launch_unclean: bool
    _server: Spawner | None

    def _apply_limits(self) -> None:
        """Set up the per-sandbox limits: ``_root`` (new, empty) on its own ``disk_mb`` MiB tmpfs, the cgroup.

        Stale tmpfs of the same uid slot (left by a process killed with SIGKILL) are unmounted and removed
        first: the slot's lock proves no live sandbox uses them (not for a slot this process hands out again,
        ``UidSlot.recycled``: they were swept when it first took the slot, and it has held it since).

        Raises:
            SandboxError: the tmpfs could not be mounted or the cgroup not created (no cgroups: the sandbox
                refuses to run without its aggregate limits).
        """
        assert self._root is not None and self._slot is not None
        for stale in () if self._slot.recycled else mounted_roots(self._root.parent):
            if stale != self._root and stale.name.startswith(f"t1-sbx-{self._slot.uid}-"):
                release_root(stale)
                with contextlib.suppress(OSError):
                    stale.rmdir()
        mount_root(self._root, self.disk_mb)
        self._ensure_cgroup()

    def _release_cgroup(self) -> bool:
        """Remove the sandbox's cgroup, killing what is left in it; idempotent.

        Returns:
            Whether a cgroup was removed here. Every process of the sandbox's uid joined it before switching
            to that uid (the launch server's child, as root) and none can leave it (no cgroup file system in
            the sandbox), so its removal, which succeeds only once it is empty, proves that no process of the
            uid is left (zombies aside: a process leaves the group when it exits, before it is reaped).

        Raises:
            SandboxError: the cgroup could not be removed (a process survived SIGKILL).
        """
        cgroup, self._cgroup = self._cgroup, None
        if cgroup is not None and (left := cgroup.remove()):
            raise SandboxError(f"sandbox cgroup {cgroup.name}: {left} could not be removed")
        return cgroup is not None

    def _no_zombie_left(self) -> bool:
        """Whether no zombie of the sandbox's uid is left, once its cgroup was removed empty.

        Every process of a sandbox descends from the launch server: a process inside is reaped in its pid
        namespace (whose end, with pid 1's, reaps them all), and what is left to reap is the server's own
        children: the launchers and the sandboxes' pid 1, which bwrap orphans and the server adopts
        (``spawnd.py``). So none of the server's unreaped children running as the uid means no zombie of
        it. Not clean (False) when a launch was cut short while starting, a launcher did not exit by itself,
        or the launches were made by more than one server (one that died left its orphans to the host's
        init), or when the server's children cannot be read.
        """
        assert self._slot is not None
        exited = all(p.returncode is not None and p.returncode >= 0 for p in self._launched)
        if self._launch_unclean or not exited:
            return False
        if self._server is None:  # never launched anything: nothing to reap
            return True
        children = self._server.children() if self._server.alive else None
        return children is not None and not pids_of_uid_among(children, self._slot.uid)

    def _ensure_cgroup(self) -> SandboxCgroup:
        if self._cgroup is None:
            self._cgroup = SandboxCgroup(
                memory_mb=self.memory_mb, max_processes=self.max_processes, cpus=self.cpus
            )
        return self._cgroup

    def _rlimits(self, cpu_time_s: float | None) -> tuple[tuple[int, int, int], ...]:
        """The per-process limits of one launch, ``(resource, soft, hard)``, set before the uid switch.

        ``RLIMIT_CPU`` is ``cpu_time_s`` (this launch's, else the sandbox's) in whole seconds (soft: SIGXCPU;
        hard, one second later: SIGKILL); ``RLIMIT_AS`` and ``RLIMIT_FSIZE`` are the MiB limits in bytes;
        ``RLIMIT_NPROC`` counts the whole sandbox (one uid); no core files.
        """
        cpu = max(1, int(self.cpu_time_s if cpu_time_s is None else cpu_time_s))
        return (
            (resource.RLIMIT_NPROC, self.max_processes, self.max_processes),
            (resource.RLIMIT_CPU, cpu, cpu + 1),
            (resource.RLIMIT_AS, self.memory_mb * 1024 * 1024, self.memory_mb * 1024 * 1024),
            (resource.RLIMIT_FSIZE, self.disk_mb * 1024 * 1024, self.disk_mb * 1024 * 1024),
            (resource.RLIMIT_CORE, 0, 0),
        )

    async def _spawn(
        self,
        argv: list[str],
        *,
        controlling_tty: bool = False,
        cpu_time_s: float | None = None,
        **streams: int,
    ) -> tuple[SpawnedProcess, str]:
        """Launch ``argv`` (a bwrap command line) under a unique ``argv[0]`` tag; safe to cancel at any point.

        The launch server (`spawner`) forks and execs it: it joins the sandbox's cgroup first (as root, so
        that bubblewrap's own set-up is charged to the sandbox too; a failure to join fails the launch rather
        than run it unlimited), starts a new session, takes a controlling terminal when asked, sets the
        `_rlimits` and switches to the sandbox's uid. bwrap gets the seccomp program on a pipe and none of
        this process's environment. The launch runs shielded; on cancellation or error every process of it
        is killed (``kill_tagged``: bwrap arms ``--die-with-parent`` in the sandbox's pid 1 only after its
        set-up, so a launch cut short during the set-up can leave pid 1 running) before the exception
        propagates.

        Args:
            argv: the bwrap command line (``argv[0]`` is the executable; the tag replaces it).
            controlling_tty: make the launch's standard input its controlling terminal (the shell).
            cpu_time_s: this launch's CPU-time limit in seconds (None: the sandbox's).
            **streams: ``stdin``, ``stdout`` and ``stderr``: a file descriptor (kept open: the caller's), or
                ``asyncio.subprocess.PIPE`` (the process's ``stdin`` / ``stdout`` / ``stderr`` streams) or
                ``asyncio.subprocess.DEVNULL``.

        Returns:
            The process (the launcher, bwrap) and its tag.

        Raises:
            SandboxError: the sandbox was closed before the launch, or the launch failed (the message names
                the step: the cgroup join, the uid switch, the exec; or the launch server's death).
        """
        assert self._slot is not None
        uid = self._slot.uid
        tag = f"bwrap-t1-{secrets.token_hex(8)}"

        async def launch() -> SpawnedProcess:
            # checked here, right before the request (no await in between): a close that ran after the
            # caller's check must not be followed by a launch under a uid that is being given back
            if self._closed:
                raise SandboxError("the sandbox was closed while a process was being started")
            cgroup = self._ensure_cgroup()
            pipes = _Pipes(streams)
            try:
                program, writer = pipes.extra()  # bwrap reads the filter to EOF; it fits in the pipe's buffer
                try:
                    os.write(writer, seccomp_program())
                finally:
                    os.close(writer)
                server = spawner()
                if self._server is not server:  # the first launch, or the server was replaced
                    self._launch_unclean |= self._server is not None
                    self._server = server
                proc = await server.spawn(
                    [tag, "--seccomp", "3", *argv[1:]],  # the program's pipe is the child's descriptor 3
                    executable=argv[0],
                    fds=[*pipes.child, program],
                    uid=uid,
                    cgroup_procs=cgroup.procs_files,
                    rlimits=self._rlimits(cpu_time_s),
                    tty=controlling_tty,
                    # bwrap's own process is the sandbox's pid 1, whose /proc/1/environ the command can read
                    env=LAUNCH_ENV,
                )
            except BaseException:
                pipes.close_ours()
                raise
            finally:
                pipes.close_child_ends()
            self._launched.append(proc)
            try:
                if self._closed:  # closed while the server started it: the close may have missed it
                    raise SandboxError("the sandbox was closed while a process was being started")
                await pipes.attach(proc)
            except BaseException:
                pipes.close_ours()
                kill_launch(proc, uid, tag)
                raise
            return proc

        spawn = asyncio.ensure_future(launch())
        try:
            return await asyncio.shield(spawn), tag
        except BaseException:
            self._launch_unclean = True
            await _abort_spawn(spawn, uid, tag)
            raise

    async def _run(
        self,
        argv: list[str],
        *,
        stdin: bytes | None,
        timeout_s: float,
        cap: int | None = MAX_EXEC_OUTPUT,
        cpu_time_s: float | None = None,
    ) -> tuple[bytes, bytes, int | None, bool, float]:
        """Run one bwrap launch to completion: ``(stdout, stderr, exit code, timed out, seconds)``.

        At the deadline, on cancellation or on any error, the launch's processes are killed (synchronously,
        so a second cancellation cannot interrupt it) and the command is never waited for.
        """
        assert self._slot is not None
        uid = self._slot.uid
        started = time.monotonic()
        proc, tag = await self._spawn(
            argv,
            cpu_time_s=cpu_time_s,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        self._procs.add(proc)
        streams = (_feed(proc, stdin), _drain(proc.stdout, cap), _drain(proc.stderr, cap))
        comm = asyncio.ensure_future(asyncio.gather(*streams, proc.wait()))
        finished = False
        try:
            done, _ = await asyncio.wait({comm}, timeout=timeout_s)
            timed_out = not done
            if timed_out:
                kill_launch(proc, uid, tag)
                try:
                    _, out, err, _ = await asyncio.wait_for(comm, timeout=5)
                except TimeoutError:
                    out, err = b"", b""
            else:
                _, out, err, _ = comm.result()
            finished = True
            return out, err, proc.returncode, timed_out, time.monotonic() - started
        finally:
            if not finished:  # cancelled (Ctrl-C) or failed: never leave it running, never wait for it
                kill_launch(proc, uid, tag)
            if not comm.done():
                comm.cancel()
            comm.add_done_callback(_consume)
            self._procs.discard(proc)
            if proc.returncode is not None and proc.returncode >= 0:  # reaped clean: nothing to remember
                self._launched.remove(proc)


async def _abort_spawn(spawn: asyncio.Future[SpawnedProcess], uid: int, tag: str) -> None:
    """Clean up a launch whose caller was cancelled (or failed): let it finish, killing what it started."""
    while not spawn.done():
        kill_tagged(uid, tag, deadline_s=0)  # its pipes close only once every process of the launch is dead
        try:
            await asyncio.wait({spawn}, timeout=0.01)
        except asyncio.CancelledError:  # a second cancellation: finish the clean-up first, then propagate
            continue
    if spawn.cancelled() or spawn.exception() is not None:
        kill_tagged(uid, tag)
        return
    kill_launch(spawn.result(), uid, tag)


async def off_loop[T](fn: Callable[[], T]) -> T:
    """``fn()`` in a worker thread; a cancellation waits for it to finish, then propagates.

    For set-up that must not stall the event loop (``/proc`` scans, mounts, cgroup files) and must not be
    left running behind a clean-up that follows the cancellation.
    """
    work = asyncio.ensure_future(asyncio.to_thread(fn))
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        while not work.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({work})
        if not work.cancelled():
            work.exception()  # retrieved: the cancellation is what propagates
        raise


def kill_launch(proc: SpawnedProcess, uid: int, tag: str) -> None:
    """SIGKILL one bwrap launch: the launcher's group and every process tagged with its ``argv[0]``."""
    killpg(proc.pid)
    left = kill_tagged(uid, tag, also=(proc.pid,))
    if left:  # pragma: no cover - a process that ignores SIGKILL (D state)
        raise SandboxError(f"sandbox uid {uid}: processes {left} survived SIGKILL")


class _Pipes:
    """The standard streams of one launch: the child's ends to send, this process's ends to attach."""

    def __init__(self, streams: dict[str, int]) -> None:
        self.child: list[int] = []  # the child's descriptors 0, 1, 2
        self.ours: dict[str, int] = {}  # stream name -> this process's end of its pipe
        self._opened: list[int] = []  # child ends opened here: closed once sent
        try:
            for name in ("stdin", "stdout", "stderr"):
                how = streams.get(name, asyncio.subprocess.DEVNULL)
                if how == asyncio.subprocess.PIPE:
                    read, write = os.pipe()
                    self.ours[name], child = (write, read) if name == "stdin" else (read, write)
                    self._opened.append(child)
                elif how == asyncio.subprocess.DEVNULL:
                    child = os.open(os.devnull, os.O_RDWR)
                    self._opened.append(child)
                else:
                    child = how
                self.child.append(child)
        except BaseException:
            self.close_child_ends()
            self.close_ours()
            raise

    def extra(self) -> tuple[int, int]:
        """Another pipe ``(read, write)`` whose read end goes to the child (closed here once sent)."""
        read, write = os.pipe()
        self._opened.append(read)
        return read, write

    def close_child_ends(self) -> None:
        for fd in self._opened:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._opened = []

    def close_ours(self) -> None:
        """Close this process's ends not attached (the launch failed)."""
        for fd in self.ours.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self.ours = {}

    async def attach(self, proc: SpawnedProcess) -> None:
        """Give ``proc`` its ``stdin`` / ``stdout`` / ``stderr`` streams over this process's pipe ends."""
        loop = asyncio.get_running_loop()
        ours, self.ours = self.ours, {}  # owned by the transports from here on
        for name, fd in ours.items():
            if name == "stdin":
                transport, protocol = await loop.connect_write_pipe(
                    asyncio.streams.FlowControlMixin, os.fdopen(fd, "wb", buffering=0)
                )
                proc.stdin = asyncio.StreamWriter(transport, protocol, None, loop)
            else:
                reader = asyncio.StreamReader(loop=loop)
                await loop.connect_read_pipe(
                    lambda r=reader: asyncio.StreamReaderProtocol(r, loop=loop),
                    os.fdopen(fd, "rb", buffering=0),
                )
                setattr(proc, name, reader)


def _consume(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()  # retrieved: no "exception was never retrieved" noise for an abandoned exec


async def _feed(proc: SpawnedProcess, data: bytes | None) -> None:
    if proc.stdin is None:
        return
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        if data:
            proc.stdin.write(data)
            await proc.stdin.drain()
        proc.stdin.close()


async def _drain(stream: asyncio.StreamReader | None, cap: int | None = MAX_EXEC_OUTPUT) -> bytes:
    """Read ``stream`` to EOF; keep its first ``cap`` bytes (all if ``cap`` is None) and a marker line."""
    kept = bytearray()
    omitted = 0
    if stream is None:
        return b""
    while chunk := await stream.read(65536):
        room = len(chunk) if cap is None else max(cap - len(kept), 0)
        kept += chunk[:room]
        omitted += len(chunk) - len(chunk[:room])
    if omitted:
        kept += f"\n[... {omitted} bytes omitted: output over {cap} bytes ...]\n".encode()
    return bytes(kept)


def killpg(pid: int) -> None:
    """SIGKILL the process group led by ``pid`` (a launcher started with ``setsid``); quiet if it is gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
