"""``LocalSandbox``: a bubblewrap sandbox on this machine (the embedded default, DESIGN.md).

Isolation (issue 2 part 4; T1 §6):

- the host file system is read-only (``/usr`` and ``/etc`` bound read-only, ``/bin /lib /lib64 /sbin`` as
  symlinks); writable are only this sandbox's own host directories bound at the task root (the Dockerfile's
  ``WORKDIR``, Harbor's ``/app``), ``/tmp``, ``/logs``, ``/home/agent`` and, once uploaded, ``/tests`` and
  ``/solution``;
- every namespace is unshared (``--unshare-all``): no network (only a down loopback), own pids, ipc, uts;
- no host privileges: bubblewrap runs under an unprivileged host uid (``200000 + slot``, one per sandbox) in
  a user namespace as uid 1000 with every capability dropped, so uid 0 is not reachable;
- per-process limits ``RLIMIT_CPU`` (cpu_time_s), ``RLIMIT_AS`` (memory_mb), ``RLIMIT_FSIZE`` (disk_mb, the
  size of one file) and a per-sandbox ``RLIMIT_NPROC`` (max_processes, counted per host uid);
- every exec has a wall-clock deadline; at the deadline its launcher's process group and its pid 1 (found by
  the launch's unique ``argv[0]``) are killed with SIGKILL and, since each exec is its own pid namespace,
  everything it started dies with it;
- ``close`` kills every process of the sandbox's uid and deletes its directories; it runs on ``async with``
  exit (normal, exception, cancellation / Ctrl-C) and, as a last resort, at interpreter exit;
- a cancelled ``exec``/``upload``/``download``/``open_shell`` kills the processes it started before the
  cancellation propagates, at any point (even mid-launch), and never waits for the command.

Each ``exec`` is a fresh ``bwrap`` over the same directories, so files persist across execs but processes do
not (a background job started by an exec dies when the exec returns). The persistent shell is one long-lived
``bwrap`` running an interactive bash on a private pseudo-terminal. Mounts are fixed when a process starts:
``/tests`` uploaded after the agent finished is visible to later execs (the verifier) and never to the agent's
shell.

Limits come from the caller, never from the task: training builds every sandbox from the recipe's
``sandbox`` section (``LocalSandbox.from_spec``: cpu_time_s, memory_mb, max_processes, disk_mb, network) and
``t1 tasks validate`` uses this class's defaults. A task's ``task.toml`` ``[environment]`` table (``cpus``,
``memory_mb``, ``storage_mb``, ``network_mode``) is not read here; of the task only ``environment/`` (its
Dockerfile, in the subset ``dockerfile.py`` accepts, and the files it copies) is used. Deadlines are the
caller's too (the recipe's ``rollout.agent_deadline_s`` and ``rollout.verifier_deadline_s`` in training),
not ``task.toml``'s ``timeout_sec`` values.
"""

from __future__ import annotations

import asyncio
import atexit
import codecs
import contextlib
import fcntl
import math
import os
import pty
import resource
import secrets
import shutil
import signal
import struct
import tarfile
import tempfile
import termios
import time
from collections.abc import Callable, Sequence
from io import BytesIO
from pathlib import Path, PurePosixPath
from typing import Any

from t1_rollout.sandbox._host import (
    UidSlot,
    acquire_uid_slot,
    bwrap_path,
    kill_tagged,
    kill_uid,
    toolchain,
)
from t1_rollout.sandbox.base import (
    ExecResult,
    Sandbox,
    SandboxError,
    SandboxTimeout,
    Shell,
    ShellDied,
    UnsupportedDockerfileInstruction,
    format_seconds,
)
from t1_rollout.sandbox.dockerfile import parse_dockerfile

__all__ = ["LocalSandbox", "LocalShell", "translate_keys"]

INNER_UID = 1000
MAX_EXEC_OUTPUT = 8 * 1024 * 1024  # bytes kept per stream of one exec
DEFAULT_TASK_ROOT = "/app"
DEFAULT_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/home/agent",
    "LANG": "C.UTF-8",
    "TERM": "xterm-256color",
    "USER": "agent",
}
# Paths the sandbox never lets a mount, upload or WORKDIR shadow.
_SYSTEM = ("/usr", "/etc", "/bin", "/lib", "/lib64", "/sbin", "/proc", "/dev", "/opt/t1-verifier")
_LIVE: set[LocalSandbox] = set()  # strong references: an unclosed sandbox is still reclaimed at exit


@atexit.register
def _reclaim_all() -> None:  # last resort (e.g. an event loop torn down by Ctrl-C before __aexit__ ran)
    for sandbox in list(_LIVE):
        sandbox._reclaim()


def _inner(path: str, where: str) -> str:
    p = PurePosixPath(path)
    if not p.is_absolute() or ".." in p.parts:
        raise SandboxError(f"{where}: sandbox path {path!r} must be absolute without '..'")
    return str(p)


def _positive(name: str, value: Any, *, whole: bool) -> float:
    """``value`` as a float after checking it is a finite number > 0 (and whole when ``whole``).

    Raises:
        TypeError: not an int or a float (bools and strings included).
        ValueError: NaN, infinite, not > 0, or (``whole``) not a whole number.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"LocalSandbox: {name} must be a number, got {type(value).__name__} {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"LocalSandbox: {name} must be a finite number > 0, got {value!r}")
    if whole and value != int(value):
        raise ValueError(f"LocalSandbox: {name} must be a whole number, got {value!r}")
    return float(value)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


class LocalSandbox(Sandbox):
    """A bubblewrap sandbox (see the module docstring for the isolation it gives).

    Args:
        cpu_time_s: ``RLIMIT_CPU`` per process, CPU seconds.
        memory_mb: ``RLIMIT_AS`` per process, MiB of address space.
        max_processes: ``RLIMIT_NPROC``: processes and threads of the whole sandbox (one host uid).
        disk_mb: ``RLIMIT_FSIZE``: the largest file a process may write, MiB (not a quota on the total).
        network: share the host's network namespace (off: only a down loopback, the default and the
            isolation this sandbox promises).
        work_dir: host directory under which the sandbox's directories are created (default: the temp dir).
        extra_env: variables added to every exec and the shell.

    Raises:
        TypeError: a limit that is not a number (a string, a bool) or a ``network`` that is not a bool.
        ValueError: a limit that is not finite and > 0, or a MiB / process count that is not a whole number
            (``memory_mb=0.5`` would become 0).
        SandboxError: at ``start`` when bubblewrap is missing (``apt-get install bubblewrap``) or not root.
    """

    def __init__(
        self,
        *,
        cpu_time_s: float = 900.0,
        memory_mb: int = 2048,
        max_processes: int = 256,
        disk_mb: int = 1024,
        network: bool = False,
        work_dir: Path | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.cpu_time_s = _positive("cpu_time_s", cpu_time_s, whole=False)
        self.memory_mb = int(_positive("memory_mb", memory_mb, whole=True))
        self.max_processes = int(_positive("max_processes", max_processes, whole=True))
        self.disk_mb = int(_positive("disk_mb", disk_mb, whole=True))
        if not isinstance(network, bool):
            raise TypeError(f"LocalSandbox: network must be True or False, got {network!r}")
        self.network = network
        self._work_dir = work_dir
        self._extra_env = dict(extra_env or {})
        self._slot: UidSlot | None = None
        self._root: Path | None = None
        self._mounts: dict[str, Path] = {}  # sandbox path -> host dir, writable
        self._task_root = DEFAULT_TASK_ROOT
        self._workdir = DEFAULT_TASK_ROOT
        self._env: dict[str, str] = dict(DEFAULT_ENV)
        self._procs: set[asyncio.subprocess.Process] = set()
        self._shell: LocalShell | None = None
        self._closed = False

    @classmethod
    def from_spec(cls, spec: Any, **overrides: Any) -> LocalSandbox:
        """Build from a ``t1_spec.LocalSandboxSpec``."""
        names = ("cpu_time_s", "memory_mb", "max_processes", "disk_mb", "network")
        kwargs = {k: getattr(spec, k) for k in names if hasattr(spec, k)}
        return cls(**(kwargs | overrides))

    # ------------------------------------------------------------------ properties
    @property
    def uid(self) -> int | None:
        """The host uid every process of this sandbox runs as (None before ``start``)."""
        return self._slot.uid if self._slot else None

    @property
    def host_root(self) -> Path | None:
        """The host directory holding all of this sandbox's files (None before start and after close)."""
        return self._root

    @property
    def task_root(self) -> str:
        """The task root inside the sandbox (the Dockerfile's first WORKDIR; Harbor's ``/app``)."""
        return self._task_root

    def verifier_env(self) -> dict[str, str]:  # noqa: D102 - documented on Sandbox
        return dict(toolchain().env)

    # ------------------------------------------------------------------ set-up
    def _prepare(self) -> None:
        if self._closed:
            raise SandboxError("sandbox is closed; create a new one")
        if self._root is not None:
            return
        bwrap_path()
        self._slot = acquire_uid_slot()
        _LIVE.add(self)
        parent = Path(self._work_dir or tempfile.gettempdir())
        for stale in parent.glob(f"t1-sbx-{self._slot.uid}-*"):  # left by a process killed with SIGKILL
            shutil.rmtree(stale, ignore_errors=True)
        self._root = Path(tempfile.mkdtemp(prefix=f"t1-sbx-{self._slot.uid}-", dir=parent))
        os.chown(self._root, self._slot.uid, self._slot.uid)
        os.chmod(self._root, 0o700)
        for inner in ("/tmp", "/logs", "/home/agent"):
            self._add_mount(inner)
        for sub in ("verifier", "agent", "artifacts"):
            (self._mounts["/logs"] / sub).mkdir()
            os.chown(self._mounts["/logs"] / sub, self._slot.uid, self._slot.uid)

    def _add_mount(self, inner: str) -> Path:
        assert self._root is not None and self._slot is not None
        reserved = _SYSTEM + tuple(dest for _, dest in toolchain().binds)
        if any(_under(inner, s) or _under(s, inner) for s in reserved) or inner == "/":
            raise SandboxError(f"sandbox path {inner} would shadow a system or toolchain directory")
        host = self._root / ("m" + inner.replace("/", "_"))
        host.mkdir(exist_ok=True)
        os.chown(host, self._slot.uid, self._slot.uid)
        self._mounts[inner] = host
        return host

    def _host_path(self, inner: str, where: str) -> Path:
        """Host path of a sandbox path in a writable mount (build time only: the agent has not run yet)."""
        for mount in sorted(self._mounts, key=len, reverse=True):
            if _under(inner, mount):
                return self._mounts[mount] / os.path.relpath(inner, mount)
        raise SandboxError(f"{where}: {inner} is outside the writable mounts {sorted(self._mounts)}")

    def _preexec(
        self, *, controlling_tty: bool = False, cpu_time_s: float | None = None
    ) -> Callable[[], None]:
        assert self._slot is not None
        uid = self._slot.uid
        cpu = self.cpu_time_s if cpu_time_s is None else cpu_time_s
        limits = (
            (resource.RLIMIT_NPROC, self.max_processes),
            (resource.RLIMIT_CPU, max(1, int(cpu))),  # soft: SIGXCPU; hard (+1 s): SIGKILL
            (resource.RLIMIT_AS, self.memory_mb * 1024 * 1024),
            (resource.RLIMIT_FSIZE, self.disk_mb * 1024 * 1024),
            (resource.RLIMIT_CORE, 0),
        )

        def preexec() -> None:  # runs in the forked child before exec: no allocation-heavy work
            os.setsid()
            if controlling_tty:
                fcntl.ioctl(0, termios.TIOCSCTTY, 0)
            for res, value in limits:
                resource.setrlimit(res, (value, value + 1 if res == resource.RLIMIT_CPU else value))
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)

        return preexec

    def _argv(
        self, command: Sequence[str], *, cwd: str, env: dict[str, str], new_session: bool = True
    ) -> list[str]:
        tc = toolchain()
        argv = [
            bwrap_path(),
            "--unshare-all",
            "--unshare-user",
            "--uid", str(INNER_UID),
            "--gid", str(INNER_UID),
            "--cap-drop", "ALL",
            "--die-with-parent",
            "--proc", "/proc",
            "--dev", "/dev",
            "--clearenv",
            "--ro-bind", "/usr", "/usr",
            "--ro-bind", "/etc", "/etc",
        ]  # fmt: skip
        for link in ("bin", "lib", "lib64", "sbin"):
            if os.path.islink(f"/{link}"):
                argv += ["--symlink", os.readlink(f"/{link}"), f"/{link}"]
            elif os.path.isdir(f"/{link}"):
                argv += ["--ro-bind", f"/{link}", f"/{link}"]
        if self.network:
            argv.append("--share-net")
        if new_session:
            argv.append("--new-session")  # no controlling terminal to inject keystrokes into (TIOCSTI)
        for host, inner in tc.binds:
            argv += ["--ro-bind", host, inner]
        for target, inner in tc.symlinks:
            argv += ["--symlink", target, inner]
        for inner in sorted(self._mounts):  # parents before children
            argv += ["--bind", str(self._mounts[inner]), inner]
        for key, value in env.items():
            argv += ["--setenv", key, value]
        argv += ["--chdir", cwd, *command]
        return argv

    def _merged_env(self, env: dict[str, str] | None) -> dict[str, str]:
        return self._env | self._extra_env | (env or {})

    # ------------------------------------------------------------------ Sandbox API
    async def start(self, environment_dir: Path, *, timeout_s: float) -> None:
        """Build ``environment_dir/Dockerfile`` (FROM bookworm, WORKDIR, COPY, ENV, RUN; module docstring).

        The first ``WORKDIR`` becomes the private writable task root (default ``/app``); ``COPY`` sources are
        relative to ``environment_dir``; ``RUN`` runs inside the sandbox (so it can write only the task root,
        ``/tmp``, ``/logs`` and the home), with the build's remaining time as its deadline.

        Raises:
            UnsupportedDockerfileInstruction: an unsupported instruction or base (named, with file and line).
            SandboxTimeout: the build ran past ``timeout_s``.
            SandboxError: a COPY source is missing or a RUN step exited non-zero (its output is in the
                message).
        """
        if self._root is not None or self._closed:
            raise SandboxError("start was already called on this sandbox; use one sandbox per trial")
        environment_dir = Path(environment_dir)
        dockerfile = environment_dir / "Dockerfile"
        if not dockerfile.is_file():
            raise SandboxError(
                f"{dockerfile}: missing; the local sandbox builds environments from a Dockerfile"
            )
        instructions = parse_dockerfile(dockerfile)
        try:
            self._prepare()
            await self._build(instructions, environment_dir, dockerfile, timeout_s)
        except BaseException:  # failed or cancelled: nothing is left behind, even outside ``async with``
            self._reclaim()
            raise

    async def _build(
        self, instructions: Sequence[Any], environment_dir: Path, dockerfile: Path, timeout_s: float
    ) -> None:
        assert self._slot is not None
        deadline = time.monotonic() + timeout_s
        root_set = False
        for ins in instructions:
            where = f"{dockerfile}:{ins.line}"
            left = deadline - time.monotonic()
            if left <= 0:
                raise SandboxTimeout(
                    f"{where}: environment build ran past its {format_seconds(timeout_s)} deadline"
                )
            if ins.name == "FROM":
                continue
            if ins.name == "ENV":
                for key, value in zip(ins.args[::2], ins.args[1::2], strict=True):
                    self._env[key] = value
            elif ins.name == "WORKDIR":
                path = ins.args[0]
                path = _inner(path if path.startswith("/") else os.path.join(self._workdir, path), where)
                if not root_set and path not in self._mounts:
                    if any(_under(path, m) for m in self._mounts):
                        raise UnsupportedDockerfileInstruction(
                            f"{where}: the first WORKDIR ({path}) must be a new task root, not inside "
                            f"{sorted(self._mounts)}"
                        )
                    self._add_mount(path)
                    self._task_root = path
                    root_set = True
                else:
                    host = self._host_path(path, where)
                    host.mkdir(parents=True, exist_ok=True)
                    shutil.chown(host, self._slot.uid, self._slot.uid)
                self._workdir = path
            elif ins.name == "COPY":
                if not root_set:
                    self._add_mount(self._task_root)
                    root_set = True
                self._copy_in(environment_dir, ins.args[:-1], ins.args[-1], where)
            elif ins.name == "RUN":
                if not root_set:
                    self._add_mount(self._task_root)
                    root_set = True
                result = await self.exec(ins.args[0], timeout_s=left)
                if result.timed_out:
                    raise SandboxTimeout(
                        f"{where}: RUN ran past the build deadline ({format_seconds(timeout_s)})"
                    )
                if result.exit_code != 0:
                    tail = (result.stdout + result.stderr)[-2000:]
                    raise SandboxError(f"{where}: RUN exited {result.exit_code}: {ins.args[0]!r}\n{tail}")
        if not root_set:
            self._add_mount(self._task_root)
        self._workdir = self._workdir if root_set else self._task_root

    def _copy_in(self, context: Path, sources: Sequence[str], dest: str, where: str) -> None:
        assert self._slot is not None
        context = context.resolve()
        dest_inner = _inner(dest if dest.startswith("/") else os.path.join(self._workdir, dest), where)
        dest_host = self._host_path(dest_inner, where)
        many = len(sources) > 1 or dest.endswith("/")
        for src in sources:
            src_host = (context / src).resolve()
            if not _under(str(src_host), str(context)) or not src_host.exists():
                raise SandboxError(f"{where}: COPY source {src!r} not found in {context}")
            if src_host.is_dir():
                shutil.copytree(src_host, dest_host, symlinks=True, dirs_exist_ok=True)
            else:
                target = dest_host / src_host.name if many or dest_host.is_dir() else dest_host
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src_host, target)
        for path in [dest_host, *dest_host.rglob("*")] if dest_host.is_dir() else [dest_host]:
            os.lchown(path, self._slot.uid, self._slot.uid)
        for parent in dest_host.parents:
            if parent == self._root:
                break
            os.lchown(parent, self._slot.uid, self._slot.uid)

    async def exec(
        self,
        command: str,
        *,
        timeout_s: float,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stdin: bytes | None = None,
        cpu_time_s: float | None = None,
    ) -> ExecResult:
        """Run ``bash -c command`` in a fresh pid namespace over the sandbox's files.

        Each of stdout and stderr keeps its first 8 MiB; the rest is drained and counted in a marker line.

        Args:
            command: a bash command line.
            timeout_s: wall-clock deadline in seconds; on expiry the process group is SIGKILLed.
            cwd: working directory inside the sandbox (default: the last WORKDIR).
            env: variables added on top of the Dockerfile's ENV.
            stdin: bytes fed to the command's standard input (default: none, ``/dev/null``).
            cpu_time_s: per-process CPU-time limit of this exec in seconds (default: the sandbox's
                ``cpu_time_s``, the agent's limit). The verifier passes its own budget, so that the agent's
                limit never kills the grader.

        Returns:
            The ``ExecResult`` (``timed_out=True`` and ``exit_code=None`` when killed at the deadline).

        Raises:
            TypeError, ValueError: ``cpu_time_s`` is not a finite number > 0.
            SandboxError: the sandbox is not started or already closed, or ``cwd`` does not exist in it (or
                is not a directory).
        """
        if cpu_time_s is not None:
            _positive("exec cpu_time_s", cpu_time_s, whole=False)
        if self._root is None or self._closed:
            raise SandboxError("exec on a sandbox that is not started (call start) or already closed")
        inner_cwd = _inner(cwd or self._workdir, "exec")
        argv = self._argv(["bash", "-c", command], cwd=inner_cwd, env=self._merged_env(env))
        stdout, stderr, code, timed_out, duration = await self._run(
            argv, stdin=stdin, timeout_s=timeout_s, cpu_time_s=cpu_time_s
        )
        if code == 1 and not stdout and stderr.startswith(f"bwrap: Can't chdir to {inner_cwd}:".encode()):
            # bwrap itself failed before bash ran: not the command's exit status
            why = stderr.decode("utf-8", "replace").strip().rsplit(": ", 1)[-1]
            raise SandboxError(
                f"exec: working directory {inner_cwd!r} is not usable in the sandbox ({why}); "
                "create it first or pass another cwd"
            )
        return ExecResult(
            stdout=stdout.decode("utf-8", "replace"),
            stderr=stderr.decode("utf-8", "replace"),
            exit_code=None if timed_out else code,
            timed_out=timed_out,
            duration_s=duration,
        )

    async def _spawn(
        self,
        argv: list[str],
        *,
        controlling_tty: bool = False,
        cpu_time_s: float | None = None,
        **streams: Any,
    ) -> tuple[asyncio.subprocess.Process, str]:
        """Launch ``argv`` (a bwrap command line) under a unique ``argv[0]`` tag; safe to cancel at any point.

        ``asyncio.create_subprocess_exec``, cancelled while it connects the pipes, SIGKILLs the launcher only
        and then waits until the pipes close; bwrap arms ``--die-with-parent`` in the sandbox's pid 1 only
        after its set-up, so a launcher killed during the set-up leaves pid 1 (and the command) running and
        that wait lasts as long as the command (or forever). Here the launch runs shielded and, on
        cancellation or error, every process of this launch is killed (``kill_tagged``) before the exception
        propagates.

        Returns:
            The process (the launcher) and its tag.

        Raises:
            SandboxError: the sandbox was closed before the launch.
        """
        assert self._slot is not None
        uid = self._slot.uid
        tag = f"bwrap-t1-{secrets.token_hex(8)}"
        preexec = self._preexec(controlling_tty=controlling_tty, cpu_time_s=cpu_time_s)

        async def launch() -> asyncio.subprocess.Process:
            # checked here, right before the fork (no await in between): a close that ran after the caller's
            # check must not be followed by a launch under a uid that is being given back
            if self._closed:
                raise SandboxError("the sandbox was closed while a process was being started")
            return await asyncio.create_subprocess_exec(
                tag, *argv[1:], executable=argv[0], preexec_fn=preexec, **streams
            )

        spawn = asyncio.ensure_future(launch())
        try:
            return await asyncio.shield(spawn), tag
        except BaseException:
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
                _kill_launch(proc, uid, tag)
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
                _kill_launch(proc, uid, tag)
            if not comm.done():
                comm.cancel()
            comm.add_done_callback(_consume)
            self._procs.discard(proc)

    async def upload(self, local: Path, remote: str, *, timeout_s: float = 60) -> None:
        """Copy a file or directory to ``remote``; the copy is made by a process inside the sandbox.

        Unpacking inside the sandbox (as the sandbox's uid) means a symlink planted by the agent cannot
        redirect the write onto the host. A ``remote`` outside the existing writable mounts (e.g. ``/tests``)
        becomes a new mount, visible to later execs only.

        Raises:
            SandboxTimeout: past ``timeout_s``.
            SandboxError: missing ``local``, a path that would shadow a system directory, or a failed unpack.
        """
        if self._root is None or self._closed:
            raise SandboxError("upload to a sandbox that is not started (call start) or already closed")
        local = Path(local)
        if not local.exists():
            raise SandboxError(f"upload: {local} does not exist")
        remote = _inner(remote, "upload")
        self._ensure_mount_for(remote)
        quoted = _shq(remote)
        if local.is_dir():
            buf = BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tar:
                tar.add(local, arcname=".", filter=_owned_by_sandbox)
            payload = buf.getvalue()
            cmd = f"mkdir -p {quoted} && tar -x --no-same-owner -f - -C {quoted}"
        else:
            payload = local.read_bytes()
            parent = _shq(str(PurePosixPath(remote).parent))
            mode = oct(local.stat().st_mode & 0o777)[2:]
            cmd = f"mkdir -p {parent} && cat > {quoted} && chmod {mode} {quoted}"
        result = await self.exec(cmd, timeout_s=timeout_s, cwd="/", stdin=payload)
        if result.timed_out:
            raise SandboxTimeout(f"upload {local} -> {remote}: ran past {format_seconds(timeout_s)}")
        if result.exit_code != 0:
            raise SandboxError(f"upload {local} -> {remote} failed: {result.stderr.strip()[-1000:]}")

    def _ensure_mount_for(self, remote: str) -> None:
        if any(_under(remote, m) for m in self._mounts):
            return
        top = "/" + PurePosixPath(remote).parts[1]
        self._add_mount(top)

    async def download(self, remote: str, local: Path, *, timeout_s: float = 60) -> None:
        """Copy ``remote`` (file or directory) out of the sandbox into ``local``.

        The archive is written by a process inside the sandbox and unpacked on the host with tarfile's
        ``data`` filter (no absolute paths, no links out of ``local``, no device files), so sandbox contents
        cannot write outside ``local``. For a directory, ``local`` receives its contents.

        Raises:
            SandboxTimeout: past ``timeout_s``.
            SandboxError: ``remote`` does not exist or cannot be read.
        """
        remote = _inner(remote, "download")
        local = Path(local)
        result_bytes = await self._exec_bytes(
            f"if [ -d {_shq(remote)} ]; then tar -c -f - -C {_shq(remote)} .; "
            f"else tar -c -f - -C {_shq(str(PurePosixPath(remote).parent))} "
            f"{_shq(PurePosixPath(remote).name)}; fi",
            timeout_s=timeout_s,
            what=f"download {remote}",
        )
        with tarfile.open(fileobj=BytesIO(result_bytes), mode="r") as tar:
            members = tar.getmembers()
            if len(members) == 1 and members[0].isfile() and not remote.endswith("/"):
                local.parent.mkdir(parents=True, exist_ok=True)
                extracted = tar.extractfile(members[0])
                assert extracted is not None
                local.write_bytes(extracted.read())
            else:
                local.mkdir(parents=True, exist_ok=True)
                tar.extractall(local, filter=_regular_only)

    async def _exec_bytes(self, command: str, *, timeout_s: float, what: str) -> bytes:
        if self._root is None or self._closed:
            raise SandboxError(f"{what}: sandbox is not started or already closed")
        argv = self._argv(["bash", "-c", command], cwd="/", env=self._merged_env(None))
        out, err, code, timed_out, _ = await self._run(argv, stdin=None, timeout_s=timeout_s, cap=None)
        if timed_out:
            raise SandboxTimeout(f"{what}: ran past {format_seconds(timeout_s)}")
        if code != 0:
            raise SandboxError(f"{what} failed: {err.decode('utf-8', 'replace').strip()[-1000:]}")
        return out

    async def open_shell(self, *, timeout_s: float = 30) -> LocalShell:
        """Open the trial's persistent interactive bash in the current working directory (one per sandbox).

        Raises:
            SandboxError: not started, closed, or a shell is already open.
            SandboxTimeout: the shell did not show its first prompt within ``timeout_s``.
        """
        if self._root is None or self._closed:
            raise SandboxError("open_shell on a sandbox that is not started or already closed")
        if self._shell is not None and self._shell.alive:
            raise SandboxError("this sandbox already has its persistent shell (one per trial)")
        env = self._merged_env({"PS1": "$ ", "PS2": "> "})
        argv = self._argv(
            ["bash", "--noprofile", "--norc", "--noediting", "-i"],
            cwd=self._workdir,
            env=env,
            new_session=False,
        )
        assert self._slot is not None
        uid = self._slot.uid
        master, slave = _open_pty()
        try:
            proc, tag = await self._spawn(argv, controlling_tty=True, stdin=slave, stdout=slave, stderr=slave)
        except BaseException:
            for fd in (master, slave):
                os.close(fd)
            raise
        shell = LocalShell(proc, master, slave, kill=lambda: _kill_launch(proc, uid, tag))
        try:
            await shell._wait_first_prompt(timeout_s)
        except BaseException:  # cancelled or no prompt: the half-started shell must not outlive the call
            shell._kill()
            raise
        self._shell = shell
        return shell

    async def stop_agent(self) -> None:
        """Kill every process of this sandbox (all are the agent's here); give the verifier its folders back.

        The agent runs as the sandbox's uid and may have locked ``/tmp``, ``/logs`` or ``/logs/verifier``
        (``chmod 555 /logs``); the verifier runs as the same uid, so it could not write its report and the
        agent's doing would read as an infrastructure failure. Restored from the host side: those folders get
        mode 0755 (``/tmp``: 1777) and the sandbox uid as owner again. The task's own files are left as the
        agent left them: they are what is graded.
        """
        shell = self._shell
        if shell is not None:
            await shell.close()
        for proc in list(self._procs):
            _killpg(proc.pid)
        if self._slot is not None:
            await asyncio.to_thread(kill_uid, self._slot.uid)
            if not self._closed:  # a closed sandbox has no folders left; its next exec says so
                await asyncio.to_thread(self._restore_verifier_folders)

    def _restore_verifier_folders(self) -> None:
        assert self._slot is not None
        uid = self._slot.uid
        logs = self._mounts.get("/logs")
        for inner, mode in (("/tmp", 0o1777), ("/logs", 0o755)):
            host = self._mounts.get(inner)
            if host is not None and not host.is_symlink():
                os.chown(host, uid, uid)
                os.chmod(host, mode)
        if logs is not None:
            verifier = logs / "verifier"
            if verifier.is_symlink() or verifier.is_file():
                verifier.unlink()
            elif verifier.is_dir():
                shutil.rmtree(verifier)
            verifier.mkdir()
            os.chown(verifier, uid, uid)

    async def close(self) -> None:
        """Kill every process of this sandbox (shell, execs, their children) and delete its directories.

        Idempotent; the reclaim itself is synchronous, so a second cancellation cannot interrupt it half-way.
        """
        shell = self._shell
        self._reclaim()
        if shell is not None:  # reap bash's bwrap so no zombie is left behind
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(shell._proc.wait(), timeout=2)

    def _reclaim(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._shell is not None:
            self._shell._kill()
        for proc in list(self._procs):
            _killpg(proc.pid)
        if self._slot is not None:
            left = kill_uid(self._slot.uid)
            if left:  # pragma: no cover - a process that ignores SIGKILL (D state)
                raise SandboxError(f"sandbox uid {self._slot.uid}: processes {left} survived SIGKILL")
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
        if self._slot is not None:
            self._slot.release()
        _LIVE.discard(self)


async def _abort_spawn(spawn: asyncio.Future[asyncio.subprocess.Process], uid: int, tag: str) -> None:
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
    _kill_launch(spawn.result(), uid, tag)


def _kill_launch(proc: asyncio.subprocess.Process, uid: int, tag: str) -> None:
    """SIGKILL one bwrap launch: the launcher's group and every process tagged with its ``argv[0]``."""
    _killpg(proc.pid)
    left = kill_tagged(uid, tag, also=(proc.pid,))
    if left:  # pragma: no cover - a process that ignores SIGKILL (D state)
        raise SandboxError(f"sandbox uid {uid}: processes {left} survived SIGKILL")


def _consume(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()  # retrieved: no "exception was never retrieved" noise for an abandoned exec


def _open_pty() -> tuple[int, int]:
    master, slave = pty.openpty()
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))  # Terminus: 160 x 40
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.ONLCR  # no \r\n translation on output
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    os.set_blocking(master, False)
    return master, slave


async def _feed(proc: asyncio.subprocess.Process, data: bytes | None) -> None:
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


def _regular_only(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    # Links are dropped (a link made in the sandbox must not make the host read or write elsewhere); the rest
    # goes through tarfile's "data" filter (no absolute paths, no device files, no setuid bits).
    if member.issym() or member.islnk():
        return None
    return tarfile.data_filter(member, dest)


def _owned_by_sandbox(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = INNER_UID
    info.uname = info.gname = ""
    return info


def _shq(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _killpg(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


# tmux key names that Terminus-style agents send as whole keystrokes (harbor_tb.md §3)
_KEY_NAMES = {"Enter": "\n", "Escape": "\x1b", "Tab": "\t", "BSpace": "\x7f", "Space": " "}


def translate_keys(keystrokes: str) -> str:
    """Map a whole-keystroke tmux key name (``C-c``, ``Enter``, ``Escape``) to its bytes; else verbatim."""
    if (
        len(keystrokes) == 3
        and keystrokes.startswith("C-")
        and keystrokes[2].isascii()
        and keystrokes[2].isalpha()
    ):
        return chr(ord(keystrokes[2].lower()) - ord("a") + 1)
    return _KEY_NAMES.get(keystrokes, keystrokes)


class LocalShell(Shell):
    r"""Interactive bash on a pseudo-terminal inside the sandbox (Terminus's tmux pane, without tmux).

    bash owns the terminal as controlling tty (job control; ``"\x03"`` interrupts the foreground job). The
    shell is idle when no keystroke waits to be read, bash is the terminal's foreground process group and
    bash is blocked reading the terminal, twice in a row 30 ms apart.
    """

    _POLL_S = 0.03
    MAX_UNREAD = 2 * 1024 * 1024  # bytes of unread output kept between two sends

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        master: int,
        slave: int,
        *,
        kill: Callable[[], None] | None = None,
    ) -> None:
        self._proc = proc
        self._kill_fn = kill
        self._master = master
        self._slave = slave
        self._buf = bytearray()
        self._omitted = 0
        self._cut_at = 0
        self._bash_pid: int | None = None
        self._closed = False
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")  # keeps a split character
        asyncio.get_running_loop().add_reader(master, self._on_readable)

    async def _wait_first_prompt(self, timeout_s: float) -> None:
        end = time.monotonic() + timeout_s
        while not await self._idle_now():
            if not self.alive:
                raise SandboxError(f"shell exited at start: {bytes(self._buf).decode('utf-8', 'replace')}")
            if time.monotonic() > end:
                self._kill()
                raise SandboxTimeout(f"shell showed no prompt within {format_seconds(timeout_s)}")
            await asyncio.sleep(self._POLL_S)

    def _on_readable(self) -> None:
        # Bounded per call so that a flood (`yes`) cannot starve the event loop; unread output keeps its first
        # and last MAX_UNREAD / 2 bytes.
        try:
            for _ in range(16):
                data = os.read(self._master, 65536)
                if not data:
                    break
                self._buf += data
                if len(self._buf) > self.MAX_UNREAD:
                    half = self.MAX_UNREAD // 2
                    cut = len(self._buf) - self.MAX_UNREAD
                    self._omitted += cut
                    del self._buf[half : half + cut]
                    self._cut_at = half
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:  # EIO: the other side is gone
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._master)

    @property
    def alive(self) -> bool:
        """Whether bash is still running."""
        return not self._closed and self._proc.returncode is None

    def _find_bash(self) -> int | None:
        if self._bash_pid is None:
            # bwrap (host) -> bwrap init (pid 1 inside) -> bash
            level = [self._proc.pid]
            for _ in range(2):
                nxt = []
                for pid in level:
                    with contextlib.suppress(OSError):
                        for tid in os.listdir(f"/proc/{pid}/task"):
                            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                                nxt += [int(c) for c in fh.read().split()]
                level = nxt
            self._bash_pid = level[0] if level else None
        return self._bash_pid

    def _idle_once(self) -> bool:
        bash = self._find_bash()
        if bash is None:
            return False
        try:
            pending = struct.unpack("i", fcntl.ioctl(self._slave, termios.FIONREAD, b"\0\0\0\0"))[0]
            with open(f"/proc/{bash}/stat") as fh:
                pgid = int(fh.read().rsplit(")", 1)[1].split()[2])
            with open(f"/proc/{bash}/wchan") as fh:
                wchan = fh.read()
            foreground = os.tcgetpgrp(self._master)
        except OSError:
            return False
        # wchan reads "0" where kernel symbols are hidden; then the other two signs decide alone
        blocked_on_tty = wchan in ("wait_woken", "n_tty_read", "", "0")
        return pending == 0 and foreground == pgid and blocked_on_tty

    async def _idle_now(self) -> bool:
        if not self._idle_once():
            return False
        await asyncio.sleep(self._POLL_S)
        return self._idle_once()

    async def send(self, keystrokes: str, *, duration_s: float, max_wait_s: float) -> str:
        """Type ``keystrokes``; wait up to ``min(duration_s, max_wait_s)`` s or until idle; return new output.

        Raises:
            ShellDied: bash exited on its own before this call (``exit``, ``set -e``, Ctrl-D: the agent's
                doing; the output it left is returned by the call during which it exited).
            SandboxError: the shell was closed (killed by the sandbox), or its host-side launcher was killed
                by a signal (nothing in the sandbox can reach it: infrastructure).
        """
        if self._closed:
            raise SandboxError("send on a closed shell (the sandbox killed it); open a new sandbox")
        code = self._proc.returncode
        if code is not None and code < 0:
            raise SandboxError(
                f"the shell's launcher (host pid {self._proc.pid}) was killed by signal {-code}, outside the "
                "sandbox: an infrastructure failure (host OOM killer, an operator), not the agent's doing"
            )
        if not self.alive:
            raise ShellDied(
                f"the shell is dead: it exited on its own (exit {self._proc.returncode}); open a new sandbox",
                exit_code=self._proc.returncode,
            )
        started = time.monotonic()
        end = started + max(0.0, min(duration_s, max_wait_s))
        if keystrokes:
            data = translate_keys(keystrokes).encode()
            while data:
                try:
                    n = os.write(self._master, data)
                    data = data[n:]
                except BlockingIOError:
                    if time.monotonic() - started > max_wait_s:
                        raise SandboxTimeout("shell input not consumed within max_wait_s") from None
                    await asyncio.sleep(self._POLL_S)
            await asyncio.sleep(self._POLL_S)
        while time.monotonic() < end and self.alive:
            if await self._idle_now():
                break
            await asyncio.sleep(self._POLL_S)
        await asyncio.sleep(0)  # let the reader drain what is pending
        self._on_readable()
        new = bytes(self._buf)
        if self._omitted:
            marker = f"\n[... {self._omitted} bytes omitted ...]\n".encode()
            new = new[: self._cut_at] + marker + new[self._cut_at :]
        self._buf.clear()
        self._omitted = 0
        return self._decoder.decode(new).replace("\r\n", "\n")

    def _kill(self) -> None:
        if self._closed:
            return
        self._closed = True
        _killpg(self._proc.pid)
        if self._kill_fn is not None:  # bwrap's pid 1 can outlive a launcher killed during its set-up
            with contextlib.suppress(SandboxError):  # a survivor of SIGKILL is reported by close
                self._kill_fn()
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(self._master)
        for fd in (self._master, self._slave):
            with contextlib.suppress(OSError):
                os.close(fd)

    async def close(self) -> None:
        """Kill bash and everything in its pid namespace; idempotent."""
        self._kill()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._proc.wait(), timeout=5)
