"""The ``Sandbox`` interface: where an agent's shell commands and the verifier run.

Every control call takes a deadline (seconds). A sandbox is an async context manager and is always reclaimed
on exit, also when the body raises or is cancelled (Ctrl-C). Source: DESIGN.md "Interfaces between packages";
Harbor's ``BaseEnvironment`` (``exec``, ``upload``, ``download``); T1 §6 (sandboxes, deadlines).
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: the seam imports neither package at run time
    from t1_spec import Recipe
    from t1_tasks import Task

__all__ = [
    "ExecResult",
    "Sandbox",
    "STEP_ENV",
    "SandboxError",
    "SandboxTimeout",
    "Shell",
    "ShellDied",
    "UnsupportedDockerfileInstruction",
    "format_seconds",
]

#: The environment of T1's own steps in a sandbox (hashing, listing, staging, copy-back): system folders
#: only, so a ``bash``, ``tar`` or ``timeout`` the agent left on the image's ``PATH`` never runs for them.
STEP_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}


def format_seconds(seconds: float) -> str:
    """A duration for messages: ``2.6 s``, ``0.05 s``, ``12.3 s``, ``5400 s`` (3 significant digits < 100).

    Never rounds a deadline to a different-looking whole number (2.6 s is not "3 s").
    """
    if abs(seconds) >= 100:
        return f"{seconds:.0f} s"
    return f"{seconds:.3g} s"


class SandboxError(Exception):
    """A sandbox could not be created, built, used or reclaimed (infrastructure, never an agent score)."""


class SandboxTimeout(SandboxError):
    """A sandbox control call (build, upload, download, shell start) ran past its deadline."""


class ShellDied(SandboxError):
    """The persistent shell's process exited on its own: the agent's doing, not the infrastructure's.

    ``exit``, ``set -e`` and a failing command, Ctrl-D at the prompt, or a limit that killed bash. The harness
    ends the episode with ``finish = "shell_died"`` and the verifier still grades the task; a shell killed by
    the sandbox itself (``close``) raises a plain :class:`SandboxError` instead.

    Attributes:
        exit_code: the shell's exit status (negative: killed by that signal), when known.
    """

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class UnsupportedDockerfileInstruction(SandboxError):
    """The Dockerfile uses an instruction (or a base image) this sandbox backend cannot build."""


@dataclass(frozen=True)
class ExecResult:
    """The result of one ``Sandbox.exec``.

    Attributes:
        stdout: standard output, decoded as UTF-8 (invalid bytes replaced).
        stderr: standard error, decoded likewise.
        exit_code: the command's exit status; ``None`` when it was killed at the deadline.
        timed_out: the command ran past ``timeout_s`` and its whole process group was killed.
        duration_s: wall-clock seconds from launch to exit (or kill).
    """

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    duration_s: float

    @property
    def ok(self) -> bool:
        """Exited 0 within the deadline."""
        return self.exit_code == 0 and not self.timed_out


class Shell(abc.ABC):
    """One persistent interactive shell per trial (Terminus-2's tmux pane; harbor_tb.md §3).

    The working directory and environment persist across ``send`` calls. A command that outlives
    ``duration_s`` keeps running; its later output is returned by a later ``send``.
    """

    @abc.abstractmethod
    async def send(self, keystrokes: str, *, duration_s: float, max_wait_s: float) -> str:
        r"""Type ``keystrokes`` and return the output produced since the previous call.

        Args:
            keystrokes: bytes to type, verbatim (end with ``"\\n"`` to run a line; ``"\\x03"`` is Ctrl-C).
                ``""`` only polls.
            duration_s: seconds to wait for output; returns earlier once the shell is idle again (prompt
                shown, nothing left to read).
            max_wait_s: hard cap on the whole call in seconds (``duration_s`` is clipped to it).

        Returns:
            New output (stdout and stderr interleaved as a terminal shows them, typed keystrokes echoed).

        Raises:
            ShellDied: the shell process exited on its own before this call (the agent ended it).
            SandboxError: the shell was closed by the sandbox, or another infrastructure failure.
        """

    @property
    @abc.abstractmethod
    def alive(self) -> bool:
        """Whether the shell process is still running."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Kill the shell and everything it started; idempotent."""


class Sandbox(abc.ABC):
    """An isolated environment for one trial: build, exec, upload, download, persistent shell, close.

    Use as ``async with`` so that ``close`` always runs.
    """

    #: Whether the environment's image was built with network (``True``), without (``False``), or unknown
    #: (``None``: the backend does not build, or the image does not say); set by ``start``. The running
    #: sandbox's own network is the backend's ``network`` policy, never this.
    built_with_network: bool | None = None

    @abc.abstractmethod
    async def start(self, environment_dir: Path, *, timeout_s: float) -> None:
        """Build the task's environment (``environment/Dockerfile`` and its fixtures).

        Raises:
            UnsupportedDockerfileInstruction: an instruction this backend cannot build (named, with its line).
            SandboxTimeout: the build ran past ``timeout_s``.
            SandboxError: a build step failed.
        """

    @abc.abstractmethod
    async def exec(
        self,
        command: str,
        *,
        timeout_s: float,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        cpu_time_s: float | None = None,
    ) -> ExecResult:
        """Run ``command`` with ``bash -c`` and wait for it, at most ``timeout_s`` seconds.

        On timeout the whole process group (and everything else the command started) is killed and the result
        has ``timed_out=True``; an exec timeout is a result, not an exception. ``cpu_time_s`` overrides the
        sandbox's per-process CPU-time limit for this exec (seconds; None keeps the sandbox's).
        """

    @abc.abstractmethod
    async def upload(
        self, local: Path, remote: str, *, timeout_s: float = 60, read_only: bool = False
    ) -> None:
        """Copy a local file or directory to the absolute path ``remote`` inside the sandbox.

        With ``read_only`` the copy is owned by an identity the sandbox's processes do not run as and has no
        write bit, so neither the agent nor the code the tests run can change, add or remove its files (the
        held-out tests, T1 §10: read-only test mounts).
        """

    @abc.abstractmethod
    async def download(self, remote: str, local: Path, *, timeout_s: float = 60) -> None:
        """Copy the file or directory ``remote`` inside the sandbox to ``local``."""

    @abc.abstractmethod
    async def open_shell(self) -> Shell:
        """Open the trial's persistent shell (one per trial) in the task root."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Kill every process of the sandbox and delete its files; idempotent."""

    async def stop_agent(self) -> None:  # noqa: B027 - an optional hook, not abstract
        """End the agent phase: kill the persistent shell and everything the agent left running.

        Called by the verifier run before the tests are uploaded, so nothing of the agent can touch the tests
        or the verifier's output. The default does nothing (for backends without a persistent shell).
        """

    async def exec_verifier(self, command: str, *, timeout_s: float, cwd: str | None = None) -> ExecResult:
        """Run the verifier's ``command`` (``bash /tests/test.sh``) with the verifier toolchain available.

        The toolchain (python3 with pytest and pytest-json-ctrf where the image has none) is visible to
        this launch only, never to the agent's shell or execs. ``timeout_s`` is the wall-clock deadline and
        also the per-process CPU budget. ``cwd=None`` runs in the environment's working directory (the
        Dockerfile's last ``WORKDIR``), where Harbor runs ``tests/test.sh``. The default puts `verifier_env`
        on PATH and calls `exec`.
        """
        return await self.exec(
            command, timeout_s=timeout_s, cwd=cwd, env=self.verifier_env(), cpu_time_s=timeout_s
        )

    @contextlib.asynccontextmanager
    async def sealed_verifier(self, tests: Path, remote: str, *, timeout_s: float) -> AsyncIterator[Sandbox]:
        """End the agent phase and give the sandbox the verifier runs in, the tests at ``remote`` read-only.

        Everything the verifier run does after the agent (``exec_verifier``, hashing, copy-back) goes through
        the yielded sandbox, which is reclaimed on exit (also on error or cancellation). The default is
        the agent's own sandbox: ``stop_agent()``, then ``upload(tests, remote, read_only=True)``; the
        verifier then runs there as ``exec_verifier`` runs it (the local backend: the agent's uid). The Docker
        backend yields a fresh container of the agent's committed filesystem where the verifier runs as root
        (``t1_sandbox.docker.sealed``), as Harbor runs it.

        Args:
            tests: the task's held-out ``tests/`` directory on the host.
            remote: the absolute path the tests get in the verifier's sandbox (``/tests``).
            timeout_s: deadline of each control call (upload, setup), seconds.

        Raises:
            SandboxError: ending the agent phase, or putting the tests in place, failed.
        """
        await self.stop_agent()
        await self.upload(tests, remote, timeout_s=timeout_s, read_only=True)
        yield self

    async def exec_solution(self, command: str, *, timeout_s: float) -> ExecResult:
        """Run the reference solution (``bash /solution/solve.sh``) in the task root, at most ``timeout_s``.

        Harbor runs it as root; the default runs it as ``exec`` does (the local backend: the agent's uid).
        The Docker backend runs it as the container's root.
        """
        return await self.exec(command, timeout_s=timeout_s)

    def verifier_env(self) -> dict[str, str]:
        """Environment variables that put the verifier toolchain (python3 with pytest) on PATH for ``exec``.

        Empty for backends whose image carries its own toolchain.
        """
        return {}

    @classmethod
    def check_environment(cls, task: Task, recipe: Recipe | None = None) -> list[str]:
        """Why this backend cannot build or run ``task``'s environment, one line each (empty: it can).

        Called for every task of a pool before any model is built (``t1 train``, ``t1 recipe validate``), so
        a pool the chosen backend cannot run is refused at once, each task named. Cheap and static: it reads
        ``task.environment_dir`` (the Dockerfile) and ``task.environment`` (``[environment]`` of task.toml:
        ``docker_image``, resources, network policy), starts nothing and reaches no daemon or network.

        Args:
            task: the task, as loaded by ``t1_tasks.load_task``.
            recipe: the run's recipe (its ``sandbox`` section is this backend's kind), or None for the
                backend's defaults.

        Returns:
            One line per problem, each naming the file (and line) or the task.toml key and what would run it.
            The default finds nothing (a backend that builds any Dockerfile).
        """
        return []

    @classmethod
    def run_options(cls, recipe: Recipe, *, run_id: str) -> dict[str, Any]:
        """Keyword arguments for ``from_spec`` that come from the run rather than the ``sandbox`` section.

        The run's sandbox factory passes them to every sandbox it makes (``t1.run.build.sandbox_factory``):
        e.g. the run id that labels a run's sandboxes for orphan cleanup, or the recipe's creation pacing
        (``rollout.creation_rate_per_s``, ``creation_quota_per_min``, T1 §7.4). The default passes none.

        Args:
            recipe: the run's recipe.
            run_id: the run's id (``$T1_RUN_ID`` when set).
        """
        return {}

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
