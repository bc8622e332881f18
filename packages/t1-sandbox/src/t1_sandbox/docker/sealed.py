"""The Docker sandbox's sealed verifier: the agent's final filesystem in a fresh container, verified as root.

Harbor runs a task's ``tests/test.sh`` as root (harbor_tb.md §1.3); T1 §10 asks for read-only test mounts.
`sealed_box`, after the agent phase:

1. ends it (``DockerSandbox.stop_agent``: every process of the agent killed, its folders given back);
2. commits the stopped container (``docker commit``, paused) to an image of the agent's final filesystem;
3. puts the tests in a new volume (root-owned, no write bit) through a created, never started helper;
4. starts a fresh container of that image with the sandbox's own host settings (network, CPU, memory, pids,
   disk, capabilities, seccomp, no-new-privileges), the tests volume mounted read-only: no process of the
   agent exists there, and not even root can write the tests (no ``CAP_SYS_ADMIN`` to remount them);
5. makes ``/logs`` root's, mode 0700: the agent's uid can neither read nor write the report's folder.

The verifier, T1's own steps and the reference solution run as root in it (`SealedBox`). On exit (normal,
error, cancellation) the container, the volume and the image are removed, waited for through repeated
cancellations.

Limit: the program under test runs as root in the box, as it does under Harbor; it may replace the box's
own binaries, which T1's steps after ``test.sh`` (hashing, copy-back) still run. Every process it left is
killed (by the toolchain's interpreter, not the box's) before those steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import secrets
import shlex
import stat
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from t1_sandbox.base import ExecResult, SandboxError
from t1_sandbox.docker import client as dc
from t1_sandbox.docker.launch import ROOT_ENV
from t1_sandbox.docker.sandbox import DockerSandbox
from t1_sandbox.docker.stream import Frames, exec_socket
from t1_sandbox.docker.toolchain import NOT_INHERITED, PYTHON

__all__ = ["SEALED_REPOSITORY", "SealedBox", "sealed_box", "tests_archive"]

#: Seconds the daemon may take to commit the agent's container (its whole filesystem diff, paused); a commit
#: that gives no answer by then fails the verification as an infrastructure failure, never as the agent's 0.
COMMIT_TIMEOUT_S = 600.0

#: The repository of the committed images (one tag per verifier run, removed with it).
SEALED_REPOSITORY = "t1-sealed"
#: Prints the folders of ``$1`` (a ``PATH``) that only root can change: absolute, existing, and the folder
#: and each folder above its resolved target owned by root and writable by no group or other. A folder the
#: agent could write (an image's ``ENV PATH=/app/.venv/bin:$PATH``, the task root being the agent's) would
#: hand root's ``bash``, ``curl`` or ``uv`` lookups in the box to a file the agent left there.
_ROOT_ONLY_PATH = (
    'IFS=:; for d in $1; do case "$d" in /*) ;; *) continue ;; esac; '
    'p=$(readlink -f -- "$d") && [ -d "$p" ] || continue; ok=1; '
    'while :; do [ "$(stat -c %u -- "$p")" = 0 ] || ok=0; '
    'case "$(stat -c %A -- "$p")" in ?????w????|????????w?) ok=0 ;; esac; '
    '[ "$p" = / ] && break; p=$(dirname -- "$p"); done; [ $ok = 1 ] && printf "%s\\n" "$d"; done'
)
#: Kills every process of the container but init and itself, by the toolchain's interpreter (on the
#: read-only volume): nothing the program under test replaced in the box runs for it.
_KILL_ALL = (
    "import os, signal, time\n"
    "for _ in range(200):\n"
    "    try:\n"
    "        os.kill(-1, signal.SIGKILL)\n"
    "    except ProcessLookupError:\n"
    "        break\n"
    "    time.sleep(0.02)\n"
)


def tests_archive(tests: Path) -> bytes:
    """A tar of the directory ``tests``: owner root, no write bit, regular files and folders only (bytes)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in [tests, *sorted(tests.rglob("*"))]:
            if path.is_symlink() or not (path.is_dir() or path.is_file()):
                continue  # a download drops links too (t1_sandbox.transfer.regular_only)
            info = tar.gettarinfo(str(path), arcname=path.relative_to(tests).as_posix() or ".")
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mode = 0o555 if path.is_dir() else (0o555 if path.stat().st_mode & stat.S_IXUSR else 0o444)
            if path.is_file():
                with path.open("rb") as fh:
                    tar.addfile(info, fh)
            else:
                tar.addfile(info)
    return buffer.getvalue()


def _make_box(
    parent: DockerSandbox,
    remote: str,
    labels: dict[str, str],
    token: str,
    tests: bytes,
    commit_timeout_s: float,
) -> str:
    """Commit ``parent``, fill the tests volume, create and start the fresh container; returns its id.

    Blocking (run in a thread). The image and the volume are named by ``token`` (removed by `_reclaim`).

    Raises:
        SandboxError: the agent's container is gone, the daemon refused a step, or the commit gave no answer
            within ``commit_timeout_s`` seconds (an infrastructure failure, never the agent's score).
    """
    import docker
    import requests

    api = dc.api_client(parent.host)
    agent = parent.container_id
    if agent is None:
        raise SandboxError("sealed verifier: the agent's container is gone (closed or never started)")
    try:
        try:
            image = dc.api_client(parent.host, timeout=commit_timeout_s).commit(
                agent, repository=SEALED_REPOSITORY, tag=token, pause=True, conf={"Labels": labels}
            )["Id"]
        except requests.exceptions.RequestException as exc:
            raise SandboxError(
                f"sealed verifier: committing the agent's container {agent[:12]} gave no answer within "
                f"{commit_timeout_s:g} s ({type(exc).__name__}); its image, if the daemon still makes it, "
                f"carries the label t1.sealed={token} and this process's labels, and goes with its leftovers "
                "(the watchdog when it exits, or the next process's start sweep)"
            ) from exc
        api.create_volume(f"t1-tests-{token}", labels=labels)
        helper = api.create_container(
            image,
            command=["true"],
            entrypoint=["true"],
            host_config=api.create_host_config(
                binds={f"t1-tests-{token}": {"bind": "/t1-fill", "mode": "rw"}}
            ),
            labels=labels,
            network_disabled=True,
        )["Id"]
        try:
            api.put_archive(helper, "/t1-fill", tests)
        finally:
            api.remove_container(helper, force=True)
        inspected = api.inspect_container(agent)
        host_config = dict(inspected["HostConfig"])
        # the agent container's own settings, one bind more: the tests, read-only
        host_config["Binds"] = [*(host_config.get("Binds") or []), f"t1-tests-{token}:{remote}:ro"]
        config = inspected.get("Config") or {}
        created = api.create_container(
            image,
            command=config.get("Cmd"),
            entrypoint=config.get("Entrypoint"),
            user="0",
            working_dir="/",
            labels=(config.get("Labels") or {}) | labels,
            host_config=host_config,
            name=f"t1-sealed-{token}",
            network_disabled=bool(config.get("NetworkDisabled")),
        )["Id"]
        dc.track(created, parent.host)
        api.start(created)
        return created
    except docker.errors.APIError as exc:
        raise SandboxError(f"sealed verifier: the daemon refused a step: {exc.explanation or exc}") from exc


def _reclaim(host: str | None, container: str | None, token: str) -> None:
    """Remove the box's container, then its tests volume and image (each idempotent); blocking."""
    import docker

    api = dc.api_client(host)
    problems = []
    if container is not None:
        try:
            dc.remove_container(container, host)
        except SandboxError as exc:
            problems.append(str(exc))
    for what, remove in (
        ("volume", functools.partial(api.remove_volume, f"t1-tests-{token}", force=True)),
        ("image", functools.partial(api.remove_image, f"{SEALED_REPOSITORY}:{token}", force=True)),
    ):
        try:
            remove()
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            problems.append(f"{what}: {exc}")
    if problems:
        raise SandboxError(f"sealed verifier box {token} not fully reclaimed: {'; '.join(problems)}")


@contextlib.asynccontextmanager
async def sealed_box(
    parent: DockerSandbox, tests: Path, remote: str, *, timeout_s: float
) -> AsyncIterator[SealedBox]:
    """The verifier's box of ``parent`` (the module docstring), the tests at ``remote``; reclaimed on exit.

    Args:
        parent: the started sandbox whose agent has finished.
        tests: the task's held-out ``tests/`` on the host.
        remote: where the tests are mounted read-only (``/tests``).
        timeout_s: deadline of the box's setup command, seconds (the commit has its own, `COMMIT_TIMEOUT_S`).

    Raises:
        SandboxError: ending the agent phase, the commit, the volume or the container failed.
    """
    await parent.stop_agent()
    token = secrets.token_hex(8)
    labels = dc.owner_labels(parent.run_id) | {"t1.sealed": token}
    archive = await asyncio.to_thread(tests_archive, Path(tests))
    making = asyncio.ensure_future(
        asyncio.to_thread(_make_box, parent, remote, labels, token, archive, COMMIT_TIMEOUT_S)
    )
    container: str | None = None
    try:
        container = await asyncio.shield(making)
        box = SealedBox(parent, container)
        setup = await box._root(
            "chown -h 0:0 /logs 2>/dev/null || { rm -rf /logs && mkdir /logs; }; chmod 0700 /logs",
            timeout_s=timeout_s,
        )
        if not setup.ok:
            raise SandboxError(f"sealed verifier: making /logs root's failed: {setup.stderr.strip()[-500:]}")
        await box._keep_root_path(timeout_s)
        yield box
    finally:
        if container is None and not making.cancelled():
            with contextlib.suppress(BaseException):
                container = await asyncio.shield(making)  # cancelled mid-way: what it made is reclaimed
        removal = asyncio.ensure_future(asyncio.to_thread(_reclaim, parent.host, container, token))
        cancelled = False
        while not removal.done():
            try:
                await asyncio.shield(removal)
            except asyncio.CancelledError:
                cancelled = True
            except SandboxError:
                break
        if cancelled:
            raise asyncio.CancelledError
        removal.result()


class SealedBox(DockerSandbox):
    """A ``DockerSandbox`` over the fresh container of `sealed_box`: every launch runs as root (uid 0).

    ``exec``, ``exec_verifier`` and ``exec_solution`` run as root, the verifier with the toolchain on PATH;
    ``stop_agent`` kills every process but init; there is no persistent shell. ``close`` removes the container
    (the image and the volume go with `sealed_box`'s exit).
    """

    _run_uid = 0

    def __init__(self, parent: DockerSandbox, container_id: str) -> None:
        super().__init__(
            cpus=parent.cpus,
            memory_mb=parent.memory_mb,
            pids_limit=parent.pids_limit,
            disk_mb=parent.disk_mb,
            network=parent.network,
            host=parent.host,
            images=parent.images,
            cpu_time_s=parent.cpu_time_s,
            run_id=parent.run_id,
        )
        self._id = container_id
        self._started = True
        self._workdir = parent.task_root
        self._image_path = parent._image_path
        self._env = {"HOME": "/root", "LANG": "C.UTF-8", "TERM": "xterm-256color", "USER": "root"}
        self._env |= NOT_INHERITED  # no root process of the box reads the image's BASH_ENV, LD_LIBRARY_PATH
        self.choice, self.limits = parent.choice, dict(parent.limits)
        self.network = parent.limits.get("network", parent.network)

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
        """Run ``bash -c command`` as root in the box (``DockerSandbox.exec`` otherwise)."""
        return await self._exec(command, timeout_s, cwd, env, stdin, cpu_time_s, gid=0)

    async def exec_verifier(self, command: str, *, timeout_s: float, cwd: str | None = None) -> ExecResult:
        """Run the verifier's ``command`` as root with the toolchain on PATH; then kill what it left."""
        result = await self._exec(command, timeout_s, cwd, self.verifier_env(), None, timeout_s, gid=0)
        await self.stop_agent()
        return result

    async def _keep_root_path(self, timeout_s: float) -> None:
        """Keep of the image's ``PATH`` only the folders only root can change, for every launch of the box.

        Raises:
            SandboxError: the check could not run.
        """
        done = await self._root(
            f"set -- {shlex.quote(self._image_path)}; {_ROOT_ONLY_PATH}", timeout_s=timeout_s
        )
        if not done.ok:
            raise SandboxError(
                f"sealed verifier: checking the image's PATH failed: {done.stderr.strip()[-500:]}"
            )
        self._image_path = ":".join(done.stdout.splitlines()) or ROOT_ENV["PATH"]
        self._env["PATH"] = self._image_path

    async def open_shell(self, *, timeout_s: float = 30) -> Any:
        """The verifier's box has no persistent shell.

        Raises:
            SandboxError: always.
        """
        raise SandboxError("the sealed verifier box has no persistent shell (the agent phase is over)")

    async def stop_agent(self) -> None:
        """Kill every process of the box but its init (what the verifier left); none of the agent is here.

        Raises:
            SandboxError: the kill could not run.
        """
        if self._id is None or self._closed:
            return
        api = self._api()
        environment = [f"{k}={v}" for k, v in ROOT_ENV.items()]
        exec_id = (
            await asyncio.to_thread(
                api.exec_create, self._id, [PYTHON, "-I", "-c", _KILL_ALL], user="0", environment=environment
            )
        )["Id"]
        sock = await asyncio.to_thread(exec_socket, api, exec_id, tty=False)
        frames = Frames(64 * 1024)
        try:
            await asyncio.wait_for(frames.pump(sock, None), timeout=60)
        finally:
            sock.close()
        code = (await asyncio.to_thread(api.exec_inspect, exec_id)).get("ExitCode")
        if code != 0:
            why = frames.stderr.decode("utf-8", "replace").strip()[-500:]
            raise SandboxError(f"sealed verifier: killing the box's processes failed (exit {code}): {why}")
