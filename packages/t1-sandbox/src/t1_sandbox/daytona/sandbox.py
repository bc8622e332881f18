"""``DaytonaSandbox``: the ``Sandbox`` seam on a Daytona cloud sandbox, through the ``daytona`` SDK (async).

One SDK client and one Daytona sandbox per trial. Every SDK call runs under a deadline of its own (the SDK's
timeout parameter and an ``asyncio.timeout`` around it, so a hung endpoint ends as `SandboxTimeout` naming
the call); creation is paced (`pacing.creation_pacer`, T1 §7.4) and sends the resources, labels and both
lifecycle intervals explicitly (`config.placement_for`); the sandbox is deleted on every exit path
(``close``, a failed or cancelled ``start``), and a create whose answer was lost is found by its unique name
and deleted. Orphans of a dead run are deleted by label with `reclaim_run`. Sources: SDK 0.226
(``AsyncDaytona.create/get/list/delete``, ``process.exec``, ``fs.upload_file/download_file``); Harbor's
``DaytonaEnvironment`` (harbor_tb.md §4); T1 §7, §7.4. A create the API refuses with HTTP 429 or 5xx
is tried again with backoff inside the start deadline (``retry.py``); the agent's persistent bash is a
toolbox PTY session (``shell.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, TypedDict, Unpack

from t1_sandbox.base import ExecResult, Sandbox, SandboxError, SandboxTimeout, Shell, format_seconds
from t1_sandbox.daytona.command import exec_command, kill_tagged_command, parse_framed
from t1_sandbox.daytona.config import (
    RUN_LABEL,
    Placement,
    credential_problems,
    environment_problems,
    lifecycle_problems,
    placement_for,
)
from t1_sandbox.daytona.pacing import CREATION_QUOTA_PER_MIN, CREATION_RATE_PER_S, creation_pacer
from t1_sandbox.daytona.retry import refused_error, retry_delay_s, status_of, transient
from t1_sandbox.daytona.shell import PTY_COLS, PTY_ROWS, DaytonaShell, launch_line
from t1_sandbox.terminal import new_nonce
from t1_sandbox.transfer import download_command, shell_quote, unpack_download, upload_plan
from t1_spec import DaytonaSandboxSpec, Recipe

if TYPE_CHECKING:
    from daytona import AsyncDaytona, AsyncSandbox

    from t1_tasks import Task

__all__ = ["DaytonaSandbox", "DaytonaSandboxOptions", "default_run_id", "reclaim_run"]

_EXEC_HTTP_GRACE_S = 10  # the toolbox's own kill comes after the wrapper's `timeout` (command.py)
_TASK_ROOT = "/app"
_PROCESS_RUN_ID = f"{socket.gethostname()}-{os.getpid()}-{int(time.time())}"


def _new_name() -> str:
    return f"t1-{uuid.uuid4().hex[:16]}"


def default_run_id() -> str:
    """The ``t1.run`` label of this process's sandboxes: ``$T1_RUN_ID``, else ``<host>-<pid>-<start>``."""
    return os.environ.get("T1_RUN_ID") or _PROCESS_RUN_ID


class DaytonaSandboxOptions(TypedDict, total=False):
    """The keyword arguments ``DaytonaSandbox.from_spec`` passes beside the spec."""

    run_id: str
    task_id: str
    creation_rate_per_s: float
    creation_quota_per_min: float
    api_key: str


def _client(spec: DaytonaSandboxSpec, api_key: str | None = None) -> AsyncDaytona:
    """An SDK client for ``spec``'s account; the key comes from ``spec.api_key_env`` unless given."""
    from daytona import AsyncDaytona, DaytonaConfig

    key = api_key or os.environ.get(spec.api_key_env)
    if not key:
        raise SandboxError(
            f"sandbox.api_key_env: the environment variable {spec.api_key_env} is unset or empty; export "
            "your Daytona API key there"
        )
    url = spec.api_url or os.environ.get("DAYTONA_API_URL") or None
    return AsyncDaytona(DaytonaConfig(api_key=key, api_url=url, target=spec.target))


async def _call[T](what: str, awaitable: Awaitable[T], deadline_s: float) -> T:
    """``awaitable`` under ``deadline_s``; SDK errors become `SandboxError` and a hang `SandboxTimeout`.

    Both messages start with ``daytona <what>``, so a failed trial's cause names the call.
    """
    from daytona import DaytonaError, DaytonaTimeoutError

    try:
        async with asyncio.timeout(deadline_s):
            return await awaitable
    except TimeoutError as exc:
        raise SandboxTimeout(f"daytona {what}: no answer within {format_seconds(deadline_s)}") from exc
    except DaytonaTimeoutError as exc:
        raise SandboxTimeout(f"daytona {what}: timed out after {format_seconds(deadline_s)}: {exc}") from exc
    except DaytonaError as exc:
        raise SandboxError(f"daytona {what}: {exc}") from exc


class DaytonaSandbox(Sandbox):
    """A Daytona sandbox per trial (``sandbox.kind: daytona``), built with `from_spec`.

    Commands and the agent's persistent shell run as the sandbox's user (the image's, root for most task
    images, as Harbor runs them). What that means for the seam's promises, and what is not built (a read-only
    seal against a root agent), is in ``docs/backends/daytona.md``.

    Args:
        spec: the recipe's ``sandbox`` section.
        run_id: the ``t1.run`` label (default `default_run_id`).
        task_id: the ``t1.task`` label (default: the task directory's name).
        creation_rate_per_s, creation_quota_per_min: the creation pacing (default ``RolloutSpec``'s 6 / s and
            600 / min, T1 §7.4).
        api_key: the API key (default: read from ``spec.api_key_env``).
    """

    def __init__(self, spec: DaytonaSandboxSpec, **options: Unpack[DaytonaSandboxOptions]) -> None:
        self.spec = spec
        self.run_id = options.get("run_id") or default_run_id()
        self.task_id = options.get("task_id")
        self._pacing = (
            options.get("creation_rate_per_s", CREATION_RATE_PER_S),
            options.get("creation_quota_per_min", CREATION_QUOTA_PER_MIN),
        )
        self._api_key = options.get("api_key")
        self.name = _new_name()
        self.placement: Placement | None = None
        self._client: AsyncDaytona | None = None
        self._sandbox: AsyncSandbox | None = None
        self._tag = uuid.uuid4().hex
        self._workdir = _TASK_ROOT
        self._closed = False
        self._deleted = False
        self._maybe_made: list[str] = []  # names of creates sent and not answered with a refusal
        self._shell: DaytonaShell | None = None

    @classmethod
    def from_spec(cls, spec: DaytonaSandboxSpec, **options: Unpack[DaytonaSandboxOptions]) -> Self:
        """Build from the recipe's ``sandbox`` section (``kind: daytona``); see the class for ``options``."""
        return cls(spec, **options)

    @classmethod
    def run_options(cls, recipe: Recipe, *, run_id: str) -> dict[str, Any]:
        """The run id (the ``t1.run`` label of orphan cleanup) and the recipe's creation pacing, T1 §7.4."""
        return {
            "run_id": run_id,
            "creation_rate_per_s": recipe.rollout.creation_rate_per_s,
            "creation_quota_per_min": recipe.rollout.creation_quota_per_min,
        }

    @classmethod
    def preflight(cls, recipe: Recipe) -> list[str]:
        """What stops ``recipe`` from running Daytona sandboxes, one line each (empty: ready).

        The SDK missing, the API key's variable unset (named by ``sandbox.api_key_env``), or an auto-stop
        below the trial's deadline. Cheap: no SDK import, no call to Daytona (the key is not checked with the
        server; the first create does that).
        """
        assert isinstance(recipe.sandbox, DaytonaSandboxSpec)
        return credential_problems(recipe.sandbox) + lifecycle_problems(recipe)

    @classmethod
    def check_environment(cls, task: Task, recipe: Recipe | None = None) -> list[str]:
        """Why this backend cannot run ``task``'s environment, one line each (static: Daytona is not asked).

        Refused: a malformed ``[environment]`` size or cpu count, no Dockerfile, image or snapshot, a task
        that needs GPUs (this backend asks for none), and ``network_mode = "allowlist"`` (Daytona's allow
        list takes CIDR ranges, not the task's host names). Whether Daytona can build the Dockerfile or pull
        the image is known only at ``start``.
        """
        spec = recipe.sandbox if recipe is not None else DaytonaSandboxSpec()
        assert isinstance(spec, DaytonaSandboxSpec)
        return environment_problems(task, spec)

    @property
    def sandbox_id(self) -> str | None:
        """The Daytona id of the sandbox (None before ``start`` and after it failed)."""
        return self._sandbox.id if self._sandbox is not None else None

    # ------------------------------------------------------------------ create and delete
    def _params(self, placement: Placement) -> Any:
        from daytona import CreateSandboxFromImageParams, CreateSandboxFromSnapshotParams, Image, Resources

        common: dict[str, Any] = {
            "name": self.name,
            "labels": dict(placement.labels),
            "auto_stop_interval": placement.auto_stop_min,
            "auto_delete_interval": placement.auto_delete_min,
            "network_block_all": placement.network_block_all,
        }
        if placement.snapshot is not None:
            return CreateSandboxFromSnapshotParams(snapshot=placement.snapshot, **common)
        image = (
            placement.image if placement.image is not None else Image.from_dockerfile(placement.dockerfile)
        )
        resources = Resources(cpu=placement.cpu, memory=placement.memory_gib, disk=placement.disk_gib)
        return CreateSandboxFromImageParams(image=image, resources=resources, **common)

    async def start(self, environment_dir: Path, *, timeout_s: float) -> None:
        """Create the sandbox for the task at ``environment_dir`` and wait until it runs.

        The create waits for a creation token first (6 / s, 600 / min), then runs under what is left of
        ``timeout_s`` (an image build included). The task root is the image's working directory as Daytona
        reports it (``/app`` when it reports none).

        Raises:
            SandboxTimeout: pacing and creation ran past ``timeout_s`` (the sandbox is deleted).
            SandboxError: bad credentials, a malformed ``task.toml``, a refused or failed create (the
                sandbox, when it was made, is deleted).
        """
        if self._client is not None or self._closed:
            raise SandboxError("start was already called on this sandbox; use one sandbox per trial")
        self.placement = placement_for(
            self.spec, Path(environment_dir), run_id=self.run_id, task_id=self.task_id
        )
        self._client = _client(self.spec, self._api_key)
        end = time.monotonic() + timeout_s
        try:
            pacer = creation_pacer(*self._pacing)
            refused: list[str] = []
            while self._sandbox is None:
                await _call(
                    "create (waiting for a creation token)", pacer.acquire(), max(0.1, end - time.monotonic())
                )
                left = max(1.0, end - time.monotonic())
                self._maybe_made.append(self.name)
                try:
                    self._sandbox = await _call(
                        "create", self._client.create(self._params(self.placement), timeout=left), left + 5
                    )
                except SandboxError as exc:
                    code = status_of(exc.__cause__)
                    if code is not None and 400 <= code < 500:  # answered with a refusal: nothing made
                        self._maybe_made.remove(self.name)
                    elif code is not None:  # a 5xx may come after the sandbox was made: a fresh name next
                        self.name = _new_name()
                    refused.append(f"HTTP {code}" if code is not None else type(exc).__name__)
                    wait = retry_delay_s(exc.__cause__, len(refused), end - time.monotonic())
                    if wait is None:
                        if len(refused) > 1 or transient(code):
                            raise refused_error(exc, refused, timeout_s) from exc.__cause__
                        raise
                    await asyncio.sleep(wait)
            workdir = await _call("get_work_dir", self._sandbox.get_work_dir(), self.spec.control_timeout_s)
            self._workdir = workdir or _TASK_ROOT
        except (
            BaseException
        ) as exc:  # failed or cancelled: nothing is left behind, even outside ``async with``
            try:
                await asyncio.shield(self._reclaim())
            except SandboxError as cleanup:  # the first failure stays the error; the cleanup's is a note
                exc.add_note(str(cleanup))
            raise

    async def _reclaim(self) -> None:
        """Delete the sandbox (by id, else by name for a create whose answer was lost), close the client."""
        errors = []
        try:
            if not self._deleted and self._client is not None:
                for attempt in range(3):  # Harbor retries a delete twice
                    try:
                        await self._delete_once()
                        self._deleted = True
                        break
                    except SandboxError as exc:
                        errors.append(f"attempt {attempt + 1}: {exc}")
        finally:
            if self._client is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._client.close(), self.spec.control_timeout_s)
        if not self._deleted and self._client is not None:
            raise SandboxError(
                f"daytona delete of sandbox {self.sandbox_id or self.name} failed ({'; '.join(errors)}); its "
                f"auto-stop ({self.spec.auto_stop_min} min) and auto-delete "
                f"({self.spec.auto_delete_min} min) "
                f"remain, and `reclaim_run('{self.run_id}')` deletes it"
            )

    async def _delete_once(self) -> None:
        """Delete the sandbox, and every sandbox a create of this start may have made unseen (by name)."""
        from daytona import DaytonaNotFoundError

        assert self._client is not None
        deadline = self.spec.control_timeout_s
        found = [self._sandbox] if self._sandbox is not None else []
        for name in self._maybe_made:  # creates whose answer was lost, or a 5xx that came after the make
            if self._sandbox is not None and name == self._sandbox.name:
                continue
            try:
                found.append(await _call("get (by name)", self._client.get(name, deadline), deadline))
            except SandboxError as exc:
                if not isinstance(exc.__cause__, DaytonaNotFoundError):
                    raise
        for sandbox in found:
            try:
                await _call("delete", sandbox.delete(timeout=deadline), deadline + 5)
            except SandboxError as exc:
                if not isinstance(exc.__cause__, DaytonaNotFoundError):
                    raise
        self._maybe_made = [self._sandbox.name] if self._sandbox is not None else []

    async def close(self) -> None:
        """Close the agent's shell, delete the sandbox and close the SDK client; idempotent.

        Both run in one task that is waited for through any number of cancellations (a second Ctrl-C);
        the cancellation then propagates.

        Raises:
            SandboxError: three deletes failed; the sandbox is named, with the intervals that will still
                reclaim it and the `reclaim_run` call that deletes it now.
        """
        self._closed = True
        closing = asyncio.ensure_future(self._close_all())
        cancelled = False
        while not closing.done():  # waited for through repeated cancellations (a second Ctrl-C)
            try:
                await asyncio.shield(closing)
            except asyncio.CancelledError:
                cancelled = True
        if cancelled:
            raise asyncio.CancelledError
        closing.result()

    async def _close_all(self) -> None:
        """The shell, then the sandbox; one task, so that a cancelled ``close`` still runs both."""
        shell, self._shell = self._shell, None
        if shell is not None:
            with contextlib.suppress(SandboxError, TimeoutError):  # the sandbox's delete kills it too
                await asyncio.wait_for(shell.close(), self.spec.control_timeout_s + 2)
        await self._reclaim()

    # ------------------------------------------------------------------ commands
    def _live(self, what: str) -> AsyncSandbox:
        if self._sandbox is None or self._closed:
            raise SandboxError(f"{what} on a sandbox that is not started (call start) or already closed")
        return self._sandbox

    async def _run(
        self, command: str, *, timeout_s: float, cwd: str, env: dict[str, str], tag: str | None, what: str
    ) -> tuple[ExecResult, str | None]:
        sandbox = self._live(what)
        shell = exec_command(command, cwd=cwd, env=env, timeout_s=timeout_s, tag=tag)
        server_s = int(timeout_s) + 2 + _EXEC_HTTP_GRACE_S  # past the wrapper's TERM, its KILL and a margin
        begin = time.monotonic()
        response = await _call(
            what, sandbox.process.exec(shell, timeout=server_s), server_s + self.spec.control_timeout_s
        )
        duration = time.monotonic() - begin
        framed = parse_framed(response.result or "", what)
        timed_out = framed.exit_code in (124, 137) and duration >= timeout_s
        result = ExecResult(
            stdout=framed.stdout,
            stderr=framed.stderr,
            exit_code=None if timed_out else framed.exit_code,
            timed_out=timed_out,
            duration_s=duration,
        )
        return result, framed.nocwd

    async def exec(
        self,
        command: str,
        *,
        timeout_s: float,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        cpu_time_s: float | None = None,
    ) -> ExecResult:
        """Run ``bash -c command`` in the sandbox, at most ``timeout_s`` seconds (then its group is killed).

        ``cpu_time_s`` is not applied: Daytona bounds CPU by the sandbox's vCPUs, not per process.

        Returns:
            The ``ExecResult``; ``timed_out=True`` and ``exit_code=None`` when the deadline killed it (exit
            124 or 137 from ``timeout`` once the deadline has passed).

        Raises:
            SandboxError: not started or closed, an unusable ``cwd``, an answer without an exit status.
            SandboxTimeout: the toolbox gave no answer within the deadline plus ``control_timeout_s``.
        """
        where = cwd or self._workdir
        result, nocwd = await self._run(
            command, timeout_s=timeout_s, cwd=where, env=env or {}, tag=self._tag, what="exec"
        )
        if nocwd is not None:
            raise SandboxError(f"exec: working directory {where!r} is not usable in the sandbox ({nocwd})")
        return result

    async def _control(self, command: str, *, timeout_s: float, what: str) -> ExecResult:
        """An untagged command of T1's own (transfers, kills) in ``/``; non-zero exit: `SandboxError`."""
        result, _ = await self._run(command, timeout_s=timeout_s, cwd="/", env={}, tag=None, what=what)
        if result.timed_out:
            raise SandboxTimeout(f"daytona {what}: ran past {format_seconds(timeout_s)}")
        if result.exit_code != 0:
            raise SandboxError(
                f"daytona {what} failed (exit {result.exit_code}): {result.stderr.strip()[-1000:]}"
            )
        return result

    async def upload(
        self, local: Path, remote: str, *, timeout_s: float = 60, read_only: bool = False
    ) -> None:
        """Copy a file or directory to the absolute path ``remote``: a tar via the toolbox, unpacked inside.

        With ``read_only`` the copy is given to root with every write bit removed. Against a non-root agent
        that seals it; an agent running as root could undo it (not built: a seal against root), which the
        verifier's hash of the tests before and after the run detects (``tests_changed``).

        Raises:
            SandboxError: missing ``local``, a relative ``remote``, a failed transfer or unpack.
            SandboxTimeout: past ``timeout_s``.
        """
        sandbox = self._live("upload")
        local = Path(local)
        if not local.exists():
            raise SandboxError(f"upload: {local} does not exist")
        if not remote.startswith("/"):
            raise SandboxError(f"upload: {remote!r} is not an absolute path in the sandbox")
        payload, unpack = upload_plan(local, remote, owner_uid=0, read_only=read_only)
        staged = f"/tmp/.t1-upload-{uuid.uuid4().hex}"
        begin = time.monotonic()
        await _call(
            f"upload {remote} (transfer)",
            sandbox.fs.upload_file(payload, staged, int(timeout_s) + 1),
            timeout_s,
        )
        left = max(1.0, timeout_s - (time.monotonic() - begin))
        seal = f" && chown -R 0:0 {shell_quote(remote)}" if read_only else ""
        command = (
            f"( {unpack}{seal} ) < {shell_quote(staged)}; t1rc=$?; rm -f {shell_quote(staged)}; exit $t1rc"
        )
        await self._control(command, timeout_s=left, what=f"upload {local} -> {remote}")

    async def download(self, remote: str, local: Path, *, timeout_s: float = 60) -> None:
        """Copy ``remote`` (file or directory) out of the sandbox into ``local`` (as the seam says).

        A tar is written inside the sandbox, fetched through the toolbox and unpacked with links dropped and
        tarfile's ``data`` filter (``transfer.unpack_download``).

        Raises:
            SandboxError: ``remote`` does not exist or cannot be read, or the transfer failed.
            SandboxTimeout: past ``timeout_s``.
        """
        sandbox = self._live("download")
        staged = f"/tmp/.t1-download-{uuid.uuid4().hex}.tar"
        begin = time.monotonic()
        await self._control(
            f"{{ {download_command(remote)}; }} > {shell_quote(staged)}",
            timeout_s=timeout_s,
            what=f"download {remote}",
        )
        left = max(1.0, timeout_s - (time.monotonic() - begin))
        try:
            data = await _call(
                f"download {remote} (transfer)", sandbox.fs.download_file(staged, int(left) + 1), left
            )
        finally:
            with contextlib.suppress(SandboxError):
                await self._control(
                    f"rm -f {shell_quote(staged)}", timeout_s=self.spec.control_timeout_s, what="rm"
                )
        assert isinstance(data, bytes)
        unpack_download(data, remote, Path(local))

    async def open_shell(self, *, timeout_s: float = 30) -> Shell:
        """Open the trial's persistent bash (a toolbox PTY session, `DaytonaShell`) in the task root.

        Raises:
            SandboxError: not started, closed, a shell already open, or the PTY session refused or dead at
                start (with what it printed).
            SandboxTimeout: the PTY's websocket or bash's first prompt took longer than ``timeout_s``.
        """
        from daytona import PtySize

        sandbox = self._live("open_shell")
        if self._shell is not None and self._shell.alive:
            raise SandboxError("this sandbox already has its persistent shell (one per trial)")
        nonce = new_nonce()
        session_id = f"t1-shell-{uuid.uuid4().hex[:12]}"
        deadline = self.spec.control_timeout_s

        async def kill() -> None:
            from daytona import DaytonaNotFoundError

            try:
                await _call(
                    f"kill_pty_session {session_id}",
                    sandbox.process.kill_pty_session(session_id, request_timeout=deadline),
                    deadline + 1,
                )
            except SandboxError as exc:
                if not isinstance(exc.__cause__, DaytonaNotFoundError):  # gone already: bash had exited
                    raise

        shell = DaytonaShell(nonce, session_id, kill=kill)
        begin = time.monotonic()
        try:
            handle = await _call(
                f"create_pty_session {session_id}",
                sandbox.process.create_pty_session(
                    id=session_id,
                    on_data=shell.on_data,
                    cwd=self._workdir,
                    pty_size=PtySize(rows=PTY_ROWS, cols=PTY_COLS),
                ),
                timeout_s,
            )
            shell.attach(handle)
            await _call(f"PTY input {session_id}", handle.send_input(launch_line(nonce, self._tag)), deadline)
            await shell.wait_first_prompt(max(1.0, timeout_s - (time.monotonic() - begin)))
        except BaseException as exc:
            try:
                await asyncio.shield(shell.close())
            except SandboxError as cleanup:  # the sandbox's delete still kills it
                exc.add_note(str(cleanup))
            raise
        self._shell = shell
        return shell

    async def stop_agent(self) -> None:
        """Kill the persistent shell and every process still carrying this sandbox's exec tag."""
        shell, self._shell = self._shell, None
        if shell is not None:
            await shell.close()
        if self._sandbox is None or self._closed:
            return
        await self._control(
            kill_tagged_command(self._tag), timeout_s=self.spec.control_timeout_s, what="stop_agent"
        )


async def reclaim_run(
    run_id: str,
    spec: DaytonaSandboxSpec,
    *,
    api_key: str | None = None,
    keep: Callable[[str], bool] | None = None,
) -> list[str]:
    """Delete every sandbox labelled ``t1.run=<run_id>`` (the orphans of a dead or killed run).

    Args:
        run_id: the run's label value (`default_run_id` of the process that made them, or ``$T1_RUN_ID``).
        spec: the recipe's section (account, URL, ``control_timeout_s`` per call).
        api_key: the key (default: ``spec.api_key_env``).
        keep: sandbox ids not to delete (e.g. the live ones of this process).

    Returns:
        The ids deleted (or already gone when deleted).

    Raises:
        SandboxError: the listing failed, or some deletes failed (named); the others were still deleted.
    """
    from daytona import DaytonaNotFoundError, ListSandboxesQuery

    client = _client(spec, api_key)
    deadline = spec.control_timeout_s
    deleted: list[str] = []
    failed: list[str] = []
    try:

        async def listing() -> list[AsyncSandbox]:
            return [s async for s in client.list(ListSandboxesQuery(labels={RUN_LABEL: run_id}), deadline)]

        found = await _call(f"list (label {RUN_LABEL}={run_id})", listing(), deadline * 4)
        for sandbox in found:
            if keep is not None and keep(sandbox.id):
                continue
            try:
                await _call(f"delete {sandbox.id}", sandbox.delete(timeout=deadline), deadline + 5)
                deleted.append(sandbox.id)
            except SandboxError as exc:
                if isinstance(exc.__cause__, DaytonaNotFoundError):
                    deleted.append(sandbox.id)
                else:
                    failed.append(f"{sandbox.id}: {exc}")
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.close(), deadline)
    if failed:
        raise SandboxError(f"reclaim_run {run_id}: {len(failed)} deletes failed: {'; '.join(failed)}")
    return deleted
