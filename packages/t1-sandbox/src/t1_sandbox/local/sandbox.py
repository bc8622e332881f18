"""``LocalSandbox``: the ``Sandbox`` seam on this machine with bubblewrap (isolation: the package docstring).

The class ties the trades of ``sandbox/local/`` together: the ``bwrap`` command line and mounts
(``bwrap.py``), the uid slot and process sweeps (``uids.py``), process launch and kill (``process.py``), the
Dockerfile build (``build.py``) and the persistent shell (``shell.py``); file transfer uses the
backend-neutral ``sandbox/transfer.py``. Limits default to ``t1_spec.LocalSandboxSpec``'s, the only home of
those defaults.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Self, TypedDict, Unpack

from t1_sandbox.base import STEP_ENV, ExecResult, Sandbox, SandboxError, SandboxTimeout, format_seconds
from t1_sandbox.dockerfile import parse_dockerfile
from t1_sandbox.local import hostfs
from t1_sandbox.local.build import DockerfileBuild
from t1_sandbox.local.bwrap import (
    INNER_UID,
    SYSTEM_PATHS,
    bwrap_argv,
    bwrap_path,
    inner_path,
    is_under,
    local_sandbox_problems,
)
from t1_sandbox.local.cgroups import SandboxCgroup, cgroup_problems
from t1_sandbox.local.environment import environment_problems
from t1_sandbox.local.process import Launcher, kill_launch, killpg, off_loop
from t1_sandbox.local.reclaim import DIR_PREFIX, LIVE, Reclaimer, sweep_stale
from t1_sandbox.local.rootfs import release_root
from t1_sandbox.local.seal import seal_tree
from t1_sandbox.local.shell import LocalShell, open_pty
from t1_sandbox.local.spawner import SpawnedProcess, Spawner, start_spawner
from t1_sandbox.local.toolchain import bundle_masks, toolchain
from t1_sandbox.local.uids import UidSlot, acquire_uid_slot, kill_uid
from t1_sandbox.terminal import new_nonce, prompt_env
from t1_sandbox.transfer import download_command, unpack_download, upload_plan
from t1_spec import LocalSandboxSpec, Recipe

if TYPE_CHECKING:
    from t1_tasks import Task

__all__ = ["LocalSandbox", "LocalSandboxOptions"]

DEFAULT_TASK_ROOT = "/app"
DEFAULT_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/home/agent",
    "LANG": "C.UTF-8",
    "TERM": "xterm-256color",
    "USER": "agent",
}
_SPEC_DEFAULTS = LocalSandboxSpec()  # the constructor's defaults are the spec's, never a second set


def _positive(name: str, value: object, *, whole: bool) -> float:
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


class LocalSandboxOptions(TypedDict, total=False):
    """The keyword arguments of ``LocalSandbox``: what ``LocalSandbox.from_spec`` lets a caller override."""

    cpu_time_s: float
    memory_mb: int
    max_processes: int
    disk_mb: int
    network: bool
    cpus: float
    work_dir: Path | None
    extra_env: dict[str, str] | None


class LocalSandbox(Launcher, DockerfileBuild, Reclaimer, Sandbox):
    """A bubblewrap sandbox (the ``t1_sandbox.local`` docstring says the isolation it gives).

    Build it from the recipe's section with `from_spec`; the limits' defaults are ``LocalSandboxSpec``'s.

    Args:
        cpu_time_s: ``RLIMIT_CPU`` per process, CPU seconds.
        memory_mb: memory of the whole sandbox, MiB: its cgroup's limit over all its processes, tmpfs and
            ``/dev/shm`` pages included; also ``RLIMIT_AS`` per process (the second line).
        max_processes: processes and threads of the whole sandbox: its cgroup's ``pids.max`` and
            ``RLIMIT_NPROC`` (counted per host uid, one per sandbox).
        disk_mb: total size of the sandbox's files, MiB: its directories live on a tmpfs of this size; also
            ``RLIMIT_FSIZE``, the largest single file.
        network: share the host's network namespace (off: only a down loopback, the default and the
            isolation this sandbox promises).
        cpus: CPU cores the whole sandbox may use (its cgroup's CFS quota and weight).
        work_dir: host directory under which the sandbox's directories are created (default: the temp dir).
        extra_env: variables added to every exec and the shell.

    Raises:
        TypeError: a limit that is not a number (a string, a bool) or a ``network`` that is not a bool.
        ValueError: a limit that is not finite and > 0, or a MiB / process count that is not a whole number
            (``memory_mb=0.5`` would become 0).
        SandboxError: at ``start`` when bubblewrap is missing (``apt-get install bubblewrap``), not root, or
            no writable cgroup hierarchy gives the aggregate limits (the sandbox never runs without them).
    """

    def __init__(
        self,
        *,
        cpu_time_s: float = _SPEC_DEFAULTS.cpu_time_s,
        memory_mb: int = _SPEC_DEFAULTS.memory_mb,
        max_processes: int = _SPEC_DEFAULTS.max_processes,
        disk_mb: int = _SPEC_DEFAULTS.disk_mb,
        network: bool = _SPEC_DEFAULTS.network,
        cpus: float = _SPEC_DEFAULTS.cpus,
        work_dir: Path | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.cpu_time_s = _positive("cpu_time_s", cpu_time_s, whole=False)
        self.memory_mb = int(_positive("memory_mb", memory_mb, whole=True))
        self.max_processes = int(_positive("max_processes", max_processes, whole=True))
        self.disk_mb = int(_positive("disk_mb", disk_mb, whole=True))
        self.cpus = _positive("cpus", cpus, whole=False)
        self._cgroup: SandboxCgroup | None = None  # created with the sandbox's directory (`_apply_limits`)
        self._masks: dict[bool, tuple[str, ...]] = {}  # verifier launch? -> bundle dirs covered by tmpfs
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
        self._procs: set[SpawnedProcess] = set()
        self._launched: list[SpawnedProcess] = []  # launches not yet known to have exited clean (process.py)
        self._launch_unclean = False
        self._server: Spawner | None = None
        self._shell: LocalShell | None = None
        self._closed = False
        self._reclaimed = False  # set once processes, directories and slot are all gone
        self._reclaim_lock = threading.Lock()  # the close thread and the exit retry never overlap

    @classmethod
    def from_spec(cls, spec: LocalSandboxSpec, **overrides: Unpack[LocalSandboxOptions]) -> Self:
        """Build from the recipe's ``sandbox`` section (``kind: local``).

        Args:
            spec: the section; its ``cpu_time_s``, ``memory_mb``, ``max_processes``, ``disk_mb``, ``cpus``
                and ``network`` become this sandbox's limits.
            **overrides: constructor arguments that replace the spec's values or add the host-side ones
                (``work_dir``, ``extra_env``).
        """
        options: LocalSandboxOptions = {
            "cpu_time_s": spec.cpu_time_s,
            "memory_mb": spec.memory_mb,
            "max_processes": spec.max_processes,
            "disk_mb": spec.disk_mb,
            "network": spec.network,
            "cpus": spec.cpus,
        }
        return cls(**(options | overrides))

    @classmethod
    def run_options(cls, recipe: Recipe, *, run_id: str) -> dict[str, object]:
        """None to pass; starts the launch server (`spawner.start_spawner`) with the run, from its thread.

        Raises:
            SandboxError: the launch server could not be started.
        """
        del recipe, run_id
        start_spawner()
        return {}

    @classmethod
    def preflight(cls, recipe: Recipe) -> list[str]:
        """What stops ``recipe`` from running local sandboxes on this machine, one line each (empty: ready).

        Each line is a `local_sandbox_problems` line (bubblewrap missing, not root) or a `cgroup_problems`
        line (no cgroup hierarchy with the memory, pids and cpu controllers, or not writable: the sandbox
        would have no aggregate limits, so it refuses to run) prefixed with the recipe field,
        ``"sandbox.kind 'local': "``. Cheap: it starts no process and builds nothing.
        """
        problems = local_sandbox_problems()
        if not problems:  # the cgroup check needs root; not being root is already said
            problems += cgroup_problems()
        return [f"sandbox.kind 'local': {line}" for line in problems]

    @classmethod
    def check_environment(cls, task: Task, recipe: Recipe | None = None) -> list[str]:
        """What of ``task``'s environment the local sandbox cannot run (``environment.py``), one line each.

        Static and cheap: it parses the Dockerfile and reads ``task.environment``; every line names the
        real cause (no network, a read-only host userland, no image store) and ``sandbox.kind: docker``.
        """
        return environment_problems(task, recipe)

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
        LIVE.add(self)
        parent = Path(self._work_dir or tempfile.gettempdir())
        # a slot this process hands out again had its leftovers swept when first taken, and has made none
        for stale in () if self._slot.recycled else parent.glob(f"{DIR_PREFIX}{self._slot.uid}-*"):
            release_root(stale)  # its own tmpfs (rootfs.py), if still mounted (our slot is held: not live)
            hostfs.remove_tree(stale)
        # the creating pid in the name says whose it is; liveness is the slot lock (`sweep_stale`)
        prefix = f"{DIR_PREFIX}{self._slot.uid}-{os.getpid()}-"
        self._root = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        self._apply_limits()  # its own disk_mb tmpfs and cgroup (process.py), before anything is written
        os.chown(self._root, self._slot.uid, self._slot.uid)
        os.chmod(self._root, 0o700)
        for inner in ("/tmp", "/logs", "/home/agent"):
            self._add_mount(inner)
        for sub in ("verifier", "agent", "artifacts"):
            (self._mounts["/logs"] / sub).mkdir()
            os.chown(self._mounts["/logs"] / sub, self._slot.uid, self._slot.uid)

    def _add_mount(self, inner: str) -> Path:
        assert self._root is not None and self._slot is not None
        reserved = SYSTEM_PATHS + tuple(dest for _, dest in toolchain().binds)
        if any(is_under(inner, s) or is_under(s, inner) for s in reserved) or inner == "/":
            raise SandboxError(f"sandbox path {inner} would shadow a system or toolchain directory")
        # laid out at its sandbox path on the sandbox's own tmpfs: the mount table inside names no host dir
        host = self._root / inner.lstrip("/")
        host.mkdir(parents=True, exist_ok=True)
        os.chown(host, self._slot.uid, self._slot.uid)
        self._mounts[inner] = host
        return host

    def _host_path(self, inner: str, where: str) -> Path:
        """Host path of a sandbox path in a writable mount (build time only: the agent has not run yet)."""
        for mount in sorted(self._mounts, key=len, reverse=True):
            if is_under(inner, mount):
                return self._mounts[mount] / os.path.relpath(inner, mount)
        raise SandboxError(f"{where}: {inner} is outside the writable mounts {sorted(self._mounts)}")

    def _argv(
        self,
        command: Sequence[str],
        *,
        cwd: str,
        env: dict[str, str],
        new_session: bool = True,
        verifier: bool = False,
    ) -> list[str]:
        """The bwrap command line of one launch; ``verifier`` binds the toolchain (`exec_verifier` only).

        T1's installed task bundles (``toolchain.bundle_masks``, looked up once per sandbox and kind of
        launch) are covered in every launch, the verifier's included: the code under test is the agent's.
        """
        if verifier not in self._masks:
            self._masks[verifier] = bundle_masks(verifier=verifier)
        return bwrap_argv(
            command,
            cwd=cwd,
            env=env,
            mounts=self._mounts,
            network=self.network,
            new_session=new_session,
            verifier=verifier,
            masks=self._masks[verifier],
        )

    def _merged_env(self, env: dict[str, str] | None) -> dict[str, str]:
        return self._env | self._extra_env | (env or {})

    # ------------------------------------------------------------------ Sandbox API
    async def start(self, environment_dir: Path, *, timeout_s: float) -> None:
        """Build ``environment_dir/Dockerfile`` (FROM bookworm, WORKDIR, COPY, ENV, RUN; ``build.py``).

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
        work_dir = Path(self._work_dir or tempfile.gettempdir())
        try:
            # one worker thread for all of it (the stale sweep, the uid slot, tmpfs, cgroup): not on the loop
            await off_loop(lambda: (sweep_stale(work_dir), self._prepare()))
            await self._build(instructions, environment_dir, dockerfile, timeout_s)
        except BaseException:  # failed or cancelled: nothing is left behind, even outside ``async with``
            await self._reclaim_off_loop()
            raise

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
        return await self._exec(
            command, timeout_s=timeout_s, cwd=cwd, env=env, stdin=stdin, cpu_time_s=cpu_time_s, verifier=False
        )

    async def exec_verifier(self, command: str, *, timeout_s: float, cwd: str | None = None) -> ExecResult:
        """Run the verifier's ``command`` in a launch that alone has the verifier toolchain mounted.

        The toolchain (``/opt/t1-verifier``: the project's python3 with pytest and pytest-json-ctrf, and the
        base interpreter at its own path) is bound read-only into this launch only; the agent's shell and
        execs never see it, even with `verifier_env` set. ``timeout_s`` is the wall-clock deadline and the
        per-process CPU budget; the sandbox's cgroup (memory, processes, CPU share) applies as to any launch.

        Raises:
            SandboxError: as `exec`.
        """
        return await self._exec(
            command,
            timeout_s=timeout_s,
            cwd=cwd,
            env=self.verifier_env(),
            stdin=None,
            cpu_time_s=timeout_s,
            verifier=True,
        )

    async def _exec(
        self,
        command: str,
        *,
        timeout_s: float,
        cwd: str | None,
        env: dict[str, str] | None,
        stdin: bytes | None,
        cpu_time_s: float | None,
        verifier: bool,
    ) -> ExecResult:
        if cpu_time_s is not None:
            _positive("exec cpu_time_s", cpu_time_s, whole=False)
        if self._root is None or self._closed:
            raise SandboxError("exec on a sandbox that is not started (call start) or already closed")
        inner_cwd = inner_path(cwd or self._workdir, "exec")
        env = self._merged_env(env)
        argv = self._argv(["bash", "-c", command], cwd=inner_cwd, env=env, verifier=verifier)
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

    async def upload(
        self, local: Path, remote: str, *, timeout_s: float = 60, read_only: bool = False
    ) -> None:
        """Copy a file or directory to ``remote``; the copy is made by a process inside the sandbox.

        Unpacking inside the sandbox (as the sandbox's uid) means a symlink planted by the agent cannot
        redirect the write onto the host. A ``remote`` outside the existing writable mounts (e.g. ``/tests``)
        becomes a new mount, visible to later execs only.

        With ``read_only`` the top-level folder of ``remote`` must be a mount of its own that the sandbox has
        never been able to write (a new one, or one sealed by an earlier read-only upload, whose contents are
        then replaced): after the unpack, every entry of it is given to host root with no write bit
        (`seal_tree`, from the host, links never followed), so no process of the sandbox, all of which run as
        its one unprivileged uid, can change, add or remove a file there (T1 §10: read-only test mounts).

        Raises:
            SandboxTimeout: past ``timeout_s``.
            SandboxError: missing ``local``, a path that would shadow a system directory, a failed unpack,
                or (``read_only``) a ``remote`` inside a folder the sandbox's processes can write.
        """
        if self._root is None or self._closed:
            raise SandboxError("upload to a sandbox that is not started (call start) or already closed")
        local = Path(local)
        if not local.exists():
            raise SandboxError(f"upload: {local} does not exist")
        remote = inner_path(remote, "upload")
        top = "/" + PurePosixPath(remote).parts[1] if remote != "/" else "/"
        if read_only:
            writable = [
                m
                for m in self._mounts
                if (is_under(remote, m) or is_under(m, top))
                and not (m == top and self._mounts[m].stat().st_uid == 0)  # sealed earlier: ours
            ]
            if writable:
                raise SandboxError(
                    f"upload {local} -> {remote} read-only: the sandbox's processes can write "
                    f"{sorted(writable)}; a read-only upload needs a top-level folder of its own "
                    "(e.g. /tests)"
                )
            if top in self._mounts:  # replace what an earlier read-only upload sealed (root's, no links out)
                await asyncio.to_thread(hostfs.remove_tree, self._mounts.pop(top))
        self._ensure_mount_for(remote)
        payload, cmd = upload_plan(local, remote, owner_uid=INNER_UID, read_only=read_only)
        # the host's read-only system folders only: a mkdir or tar the agent left on the image PATH must not
        # fail the tests' upload (a dropped trial in place of its 0)
        result = await self.exec(cmd, timeout_s=timeout_s, cwd="/", stdin=payload, env=STEP_ENV)
        if result.timed_out:
            raise SandboxTimeout(f"upload {local} -> {remote}: ran past {format_seconds(timeout_s)}")
        if result.exit_code != 0:
            raise SandboxError(f"upload {local} -> {remote} failed: {result.stderr.strip()[-1000:]}")
        if read_only:
            try:
                await asyncio.to_thread(seal_tree, self._mounts[top])
            except OSError as exc:
                raise SandboxError(f"upload {local} -> {remote}: sealing it read-only failed: {exc}") from exc

    def _ensure_mount_for(self, remote: str) -> None:
        if any(is_under(remote, m) for m in self._mounts):
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
        remote = inner_path(remote, "download")
        local = Path(local)
        result_bytes = await self._exec_bytes(
            download_command(remote), timeout_s=timeout_s, what=f"download {remote}"
        )
        unpack_download(result_bytes, remote, local)

    async def _exec_bytes(self, command: str, *, timeout_s: float, what: str) -> bytes:
        if self._root is None or self._closed:
            raise SandboxError(f"{what}: sandbox is not started or already closed")
        argv = self._argv(["bash", "-c", command], cwd="/", env=self._merged_env(STEP_ENV))
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
        nonce = new_nonce()
        env = self._merged_env(prompt_env(nonce))
        argv = self._argv(
            ["bash", "--noprofile", "--norc", "--noediting", "-i"],
            cwd=self._workdir,
            env=env,
            new_session=False,
        )
        assert self._slot is not None
        uid = self._slot.uid
        master, slave = open_pty()
        try:
            proc, tag = await self._spawn(argv, controlling_tty=True, stdin=slave, stdout=slave, stderr=slave)
        except BaseException:
            for fd in (master, slave):
                os.close(fd)
            raise
        shell = LocalShell(proc, master, slave, nonce=nonce, kill=lambda: kill_launch(proc, uid, tag))
        try:
            await shell.wait_first_prompt(timeout_s)
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
        mode 0755 (``/tmp``: 1777) and the sandbox uid as owner again. So does the WORKDIR the verifier starts
        in (``chmod 000 /app``): its own mode gets at least 0755, through no link. The task's own files are
        left as the agent left them: they are what is graded.
        """
        shell = self._shell
        if shell is not None:
            await shell.close()
        for proc in list(self._procs):
            killpg(proc.pid)
        if self._slot is not None:
            await asyncio.to_thread(kill_uid, self._slot.uid)
            if not self._closed:  # a closed sandbox has no folders left; its next exec says so
                await asyncio.to_thread(self._restore_verifier_folders)

    async def close(self) -> None:
        """Kill every process of this sandbox (shell, execs, their children) and delete its directories.

        Idempotent. The kill and the delete run in a worker thread, so a sandbox of 200,000 files does not
        stall the event loop (the other trials); the wait for it is shielded, so a second cancellation (a
        second Ctrl-C) cannot stop it half-way: it is waited for, then the cancellation propagates. A reclaim
        the process could not wait for is retried at exit (``reclaim._reclaim_all``).

        Raises:
            SandboxError: a process survived SIGKILL (D state) or the directories could not be deleted; the
                sandbox stays listed for the retry at exit.
        """
        shell = self._shell
        await self._reclaim_off_loop()
        if shell is not None:  # reap bash's bwrap so no zombie is left behind
            with contextlib.suppress(Exception):
                await asyncio.wait_for(shell._proc.wait(), timeout=2)
