"""``DockerSandbox``: the ``Sandbox`` seam on a Docker daemon, one container per trial (isolation: package).

The class ties the trades of ``sandbox/docker/`` together: the daemon client, labels and sweeps
(``client.py``), the task's image (``images.py``), the verifier toolchain volume (``toolchain.py``), one exec
on the event loop (``stream.py``), the persistent shell (``shell.py``) and the in-container launcher
(``t1run.py``); file transfer uses the backend-neutral ``sandbox/transfer.py``. Limits default to
``t1_spec.DockerSandboxSpec``'s, the only home of those defaults.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import secrets
import time
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Self

from t1_sandbox.base import ExecResult, Sandbox, SandboxError, SandboxTimeout, format_seconds
from t1_sandbox.bash_view import BashView
from t1_sandbox.docker import client as dc
from t1_sandbox.docker.images import ImageChoice, ensure_image, network_policy, task_environment
from t1_sandbox.docker.launch import ROOT_ENV, Launches
from t1_sandbox.docker.security import CAPS, seccomp_profile
from t1_sandbox.docker.shell import DockerShell
from t1_sandbox.docker.stream import exec_socket
from t1_sandbox.docker.toolchain import LAUNCH, MOUNT, VERIFIER_GID, ensure_volume, verifier_env
from t1_sandbox.terminal import new_nonce, prompt_env
from t1_sandbox.transfer import download_command, shell_quote, unpack_download, upload_plan
from t1_spec import DockerSandboxSpec, Recipe

if TYPE_CHECKING:
    from t1_tasks import Task

__all__ = ["AGENT_UID", "DockerSandbox", "seccomp_profile"]

log = logging.getLogger("t1.sandbox.docker")
AGENT_UID = 1000
DEFAULT_TASK_ROOT = "/app"
DEFAULT_ENV = {"HOME": "/home/agent", "LANG": "C.UTF-8", "TERM": "xterm-256color", "USER": "agent"}
_SPEC = DockerSandboxSpec()
_RUN_ID = f"{dc.HOSTNAME}-{os.getpid()}-{int(time.time())}"


def _capped(recipe_value: float | None, task_value: float | None) -> float | None:
    """The task's request, capped by the recipe's limit (the recipe alone when the task says nothing)."""
    if task_value is None:
        return recipe_value
    return task_value if recipe_value is None else min(recipe_value, task_value)


class DockerSandbox(Launches, Sandbox):
    """A Docker container per trial (the ``t1_sandbox.docker`` docstring says the isolation).

    Build it from the recipe's section with `from_spec`; the defaults are ``DockerSandboxSpec``'s.

    Args:
        cpus: CPU cores of the container (``NanoCpus``), at most; a task asking fewer gets fewer.
        memory_mb: memory of the container, MiB (``Memory`` = ``MemorySwap``: no swap), at most.
        pids_limit: processes and threads of the container (``PidsLimit``).
        disk_mb: the container's writable layer, MiB (``--storage-opt size``), at most; ``None``: no cap.
        network: allow the trial's container the bridge network when the task allows it too (off: none).
        build_network: give the image build the bridge network whatever the trial gets (`network_policy`).
        host: the daemon address (``None``: ``DOCKER_HOST`` or the local socket).
        images: base image -> local image substituted for it (builds and ``docker_image``).
        cpu_time_s: ``RLIMIT_CPU`` of each agent process, CPU seconds (``None``: none).
        run_id: the ``t1.run`` label (default: one per process).
        extra_env: variables added to every exec and the shell.
    """

    def __init__(
        self,
        *,
        cpus: float = _SPEC.cpus,
        memory_mb: int = _SPEC.memory_mb,
        pids_limit: int = _SPEC.pids_limit,
        disk_mb: int | None = _SPEC.disk_mb,
        network: bool = _SPEC.network,
        build_network: bool = _SPEC.build_network,
        host: str | None = _SPEC.host,
        images: dict[str, str] | None = None,
        cpu_time_s: float | None = _SPEC.cpu_time_s,
        run_id: str | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.cpus, self.memory_mb, self.pids_limit, self.disk_mb = cpus, memory_mb, pids_limit, disk_mb
        self.network, self.build_network = network, build_network
        self.host, self.cpu_time_s = host, cpu_time_s
        self.images = dict(_SPEC.images if images is None else images)
        self.run_id = run_id or _RUN_ID
        self._extra_env = dict(extra_env or {})
        self._id: str | None = None
        self._closed = False
        self._started = False
        self._shell: DockerShell | None = None
        self._workdir = DEFAULT_TASK_ROOT
        self._env: dict[str, str] = dict(DEFAULT_ENV)
        self._image_path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        self.choice: ImageChoice | None = None
        self.limits: dict[str, object] = {}

    @classmethod
    def from_spec(cls, spec: DockerSandboxSpec, **overrides: Any) -> Self:
        """Build from the recipe's ``sandbox`` section (``kind: docker``); ``overrides`` replace values."""
        options: dict[str, Any] = {
            "cpus": spec.cpus,
            "memory_mb": spec.memory_mb,
            "pids_limit": spec.pids_limit,
            "disk_mb": spec.disk_mb,
            "network": spec.network,
            "build_network": spec.build_network,
            "host": spec.host,
            "images": dict(spec.images),
            "cpu_time_s": spec.cpu_time_s,
        }
        return cls(**(options | overrides))

    @classmethod
    def preflight(cls, recipe: Recipe) -> list[str]:
        """What stops ``recipe`` from running Docker sandboxes here, one line each (empty: ready).

        Asks the daemon (``docker info``, one image lookup per ``sandbox.images`` target): no daemon or SDK,
        a ``disk_mb`` the storage driver cannot enforce, a mapped image the daemon does not have.

        Raises:
            TypeError: ``recipe.sandbox`` is another kind's section.
        """
        spec = recipe.sandbox
        if not isinstance(spec, DockerSandboxSpec):
            raise TypeError(f"DockerSandbox.preflight: recipe.sandbox is kind {spec.kind!r}, not 'docker'")
        host = spec.host
        try:
            problems = dc.daemon_problems(host)
        except SandboxError as exc:
            return [f"sandbox.kind 'docker': {exc}"]
        if problems:
            return [f"sandbox.kind 'docker': {line}" for line in problems]
        out = []
        if spec.disk_mb is not None and (why := dc.disk_cap_problem(dc.daemon_info(host))):
            out.append(f"sandbox.disk_mb: {why}")
        api = dc.api_client(host)
        bases_of: dict[str, list[str]] = {}
        for base, target in sorted(spec.images.items()):
            bases_of.setdefault(target, []).append(base)
        for target, bases in sorted(bases_of.items()):
            try:
                api.inspect_image(target)
            except Exception:  # ImageNotFound, or an API error that says the same for this purpose
                out.append(
                    f"sandbox.images: {target} (for {', '.join(bases)}) is not in the Docker daemon (build "
                    "the local bases with tools/docker/build_base_images.sh)"
                )
        return out

    @classmethod
    def check_environment(cls, task: Task, recipe: Recipe | None = None) -> list[str]:
        """Why this backend cannot run ``task``'s environment, one line each (static: no daemon is asked).

        Refused: no ``environment/Dockerfile`` and no ``docker_image``, a Dockerfile without ``FROM``, and a
        task that needs GPUs (the Docker sandbox gives none). Whether the daemon has a base is known only at
        ``start`` (its error names the base and ``sandbox.images``).
        """
        env = task.environment
        dockerfile = Path(task.environment_dir) / "Dockerfile"
        problems = []
        if env.gpus:
            problems.append(f"{task.id}: [environment].gpus = {env.gpus}: the docker sandbox gives no GPUs")
        if not dockerfile.is_file():
            if not env.docker_image:
                problems.append(
                    f"{task.id}: {dockerfile} is missing and [environment].docker_image is not set"
                )
            return problems
        text = dockerfile.read_text(encoding="utf-8", errors="replace")
        if not any(line.strip().upper().startswith("FROM ") for line in text.splitlines()):
            problems.append(f"{dockerfile}: no FROM instruction")
        return problems

    @classmethod
    def reclaim(cls, run_id: str, host: str | None = None) -> list[str]:
        """Remove every container of run ``run_id`` (a dead run's, found by its ``t1.run`` label); blocking.

        Returns:
            The names of the removed containers.
        """
        return dc.reclaim_run(run_id, host)

    # ------------------------------------------------------------------ properties
    @property
    def container_id(self) -> str | None:
        """The container's id (None before ``start`` and after ``close``)."""
        return self._id

    @property
    def task_root(self) -> str:
        """The task root inside the container (the image's working directory; Harbor's ``/app``)."""
        return self._workdir

    def verifier_env(self) -> dict[str, str]:  # noqa: D102 - documented on Sandbox
        return verifier_env(self._image_path)

    def _api(self) -> Any:
        return dc.api_client(self.host)

    _run_uid = AGENT_UID  # of exec and exec_verifier (root in the sealed verifier's box)

    def sealed_verifier(self, tests: Path, remote: str, *, timeout_s: float) -> Any:
        """A fresh container of the agent's committed filesystem, verified as root (``docker/sealed.py``)."""
        from t1_sandbox.docker.sealed import sealed_box  # the box is a DockerSandbox: imported at use

        return sealed_box(self, tests, remote, timeout_s=timeout_s)

    async def exec_solution(self, command: str, *, timeout_s: float) -> ExecResult:
        """Run the reference solution as the container's root in the task root, as Harbor does."""
        return await self._exec(
            command, timeout_s, None, {"HOME": "/root", "USER": "root"}, None, None, gid=0, uid=0
        )

    # ------------------------------------------------------------------ start
    async def start(self, environment_dir: Path, *, timeout_s: float) -> None:
        """Build (or find) the task's image and start its container with the limits, then lay out its folders.

        Raises:
            UnsupportedDockerfileInstruction: the Dockerfile has no ``FROM``.
            SandboxTimeout: the build or the start ran past ``timeout_s``.
            SandboxError: a base image is missing and unmapped, a build step failed, or the daemon refused.
        """
        if self._started or self._closed:
            raise SandboxError("start was already called on this sandbox; use one sandbox per trial")
        self._started = True
        end = time.monotonic() + timeout_s
        try:
            await asyncio.wait_for(self._start(Path(environment_dir), end), timeout=timeout_s)
        except TimeoutError:
            await self._remove()
            raise SandboxTimeout(f"docker sandbox start ran past {format_seconds(timeout_s)}") from None
        except BaseException:
            await self._remove()
            raise

    async def _start(self, environment_dir: Path, end: float) -> None:
        env = task_environment(environment_dir)
        await asyncio.to_thread(dc.sweep_dead_owners, self.host)
        api = self._api()
        policy = network_policy(
            network=self.network, build_network=self.build_network, allow_internet=env.allow_internet
        )
        network = policy.trial  # the container's: never widened by the build's
        choice, inspected = await ensure_image(
            api, self.host, environment_dir, env, self.images, build_network=policy.build, end=end
        )
        self.choice, self.built_with_network = choice, choice.build_network
        for base, target in choice.stand_ins:
            log.warning("docker sandbox: %s stands in for %s (sandbox.images)", target, base)
        config = inspected.get("Config") or {}
        image_env = dict(e.split("=", 1) for e in config.get("Env") or [] if "=" in e)
        self._image_path = image_env.get("PATH", self._image_path)
        self._image_library_path = image_env.get("LD_LIBRARY_PATH", "")
        self._workdir = env.workdir or config.get("WorkingDir") or DEFAULT_TASK_ROOT
        volume = await asyncio.to_thread(ensure_volume, api, self.host, choice.image)
        cpus = _capped(self.cpus, env.cpus)
        memory = _capped(self.memory_mb, env.memory_mb)
        # disk_mb null: no cap at all (the task's storage request needs a quota the driver may not have)
        disk = None if self.disk_mb is None else _capped(self.disk_mb, env.storage_mb)
        self.limits = {"cpus": cpus, "memory_mb": memory, "disk_mb": disk, "pids": self.pids_limit}
        self.limits["network"] = network
        quota = None
        if disk is not None:
            # btrfs's quota counts the image's own extents too (the container is a snapshot of it): add them
            on_btrfs = dc.daemon_info(self.host).get("Driver") == "btrfs"
            quota = int(disk) + (-(-int(inspected.get("Size") or 0) // (1 << 20)) if on_btrfs else 0)
        host_config = api.create_host_config(
            binds={volume: {"bind": MOUNT, "mode": "ro"}},
            tmpfs={"/run/t1": "mode=0700,size=1m"},
            network_mode="bridge" if network else "none",
            mem_limit=f"{int(memory)}m",
            memswap_limit=f"{int(memory)}m",
            nano_cpus=int(float(cpus) * 1e9),
            pids_limit=self.pids_limit,
            storage_opt={"size": f"{quota}M"} if quota is not None else None,
            cap_drop=["ALL"],
            cap_add=CAPS,
            security_opt=["no-new-privileges", f"seccomp={seccomp_profile()}"],
        )
        labels = dc.owner_labels(self.run_id) | {"t1.image": choice.image}
        if choice.stand_ins:
            labels["t1.stand_in"] = ", ".join(f"{a} -> {b}" for a, b in choice.stand_ins)
        name = f"t1-{secrets.token_hex(6)}"
        create = functools.partial(
            api.create_container,
            choice.image,
            command=["init"],
            entrypoint=list(LAUNCH),
            environment={"LD_LIBRARY_PATH": ""},  # the image's, for the agent's commands only (launch.py)
            user="0",
            working_dir="/",
            labels=labels,
            host_config=host_config,
            name=name,
            network_disabled=not network,
        )
        try:
            self._id = (await asyncio.to_thread(create))["Id"]
            dc.track(self._id, self.host)
            await asyncio.to_thread(api.start, self._id)
        except Exception as exc:  # the daemon refused (a quota it cannot set, a bad limit): infrastructure
            if isinstance(exc, SandboxError) or not hasattr(exc, "explanation"):
                raise
            raise SandboxError(
                f"docker sandbox: the daemon refused the container: {exc.explanation}"
            ) from exc
        root = shell_quote(self._workdir)
        setup = await self._root(
            f"mkdir -p {root} /logs/verifier /logs/agent /logs/artifacts /home/agent /tmp && "
            f"chown -hR {AGENT_UID}:{AGENT_UID} {root} /logs /home/agent && chmod 1777 /tmp",
            timeout_s=max(1.0, end - time.monotonic()),
        )
        if not setup.ok:
            raise SandboxError(
                f"docker sandbox: laying out the task root failed: {setup.stderr.strip()[-800:]}"
            )

    def _merged_env(self, env: dict[str, str] | None) -> dict[str, str]:
        return self._env | self._extra_env | (env or {})

    # ------------------------------------------------------------------ Sandbox API
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
        """Run ``bash -c command`` as the agent (uid 1000, no capabilities) under the launcher.

        Everything the command started is killed when it exits or at the deadline (the launcher is their
        subreaper). Each of stdout and stderr keeps its first 8 MiB.

        Raises:
            SandboxError: not started or closed, or ``cwd`` cannot be entered.
        """
        return await self._exec(command, timeout_s, cwd, env, stdin, cpu_time_s, gid=AGENT_UID)

    async def exec_verifier(self, command: str, *, timeout_s: float, cwd: str | None = None) -> ExecResult:
        """Run the verifier's ``command`` as the agent's uid with the toolchain's group, so it alone sees it.

        ``timeout_s`` is the wall-clock deadline and each process's CPU budget.
        """
        return await self._exec(
            command, timeout_s, cwd, self.verifier_env(), None, timeout_s, gid=VERIFIER_GID
        )

    async def _exec(
        self,
        command: str,
        timeout_s: float,
        cwd: str | None,
        env: dict[str, str] | None,
        stdin: bytes | None,
        cpu_time_s: float | None,
        *,
        gid: int,
        uid: int | None = None,
    ) -> ExecResult:
        where = cwd or self._workdir
        if not where.startswith("/"):
            raise SandboxError(f"exec: cwd must be an absolute path inside the sandbox, got {where!r}")
        cpu = cpu_time_s if cpu_time_s is not None else self.cpu_time_s
        out, err, code, timed_out, duration = await self._launch(
            ["bash", "-c", command],
            timeout_s=timeout_s,
            cwd=where,
            env=self._merged_env(env),
            uid=self._run_uid if uid is None else uid,
            gid=gid,
            stdin=stdin,
            cpu_time_s=cpu,
        )
        if code == 125 and err.startswith(b"t1run: cwd "):
            raise SandboxError(
                f"exec: working directory {where!r} is not usable in the sandbox "
                f"({err.decode('utf-8', 'replace').strip().rsplit(': ', 1)[-1]}); "
                "create it first or pass another cwd"
            )
        return ExecResult(
            out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), code, timed_out, duration
        )

    async def upload(
        self, local: Path, remote: str, *, timeout_s: float = 60, read_only: bool = False
    ) -> None:
        """Copy a file or directory to the absolute path ``remote``; the unpack runs inside the container.

        A normal upload unpacks as the agent's uid (a missing top-level folder is first made by root and
        given to it). A ``read_only`` upload needs every folder above ``remote`` to be root's and writable by
        no one else (so nothing of the agent can rename it away): root replaces ``remote`` with the copy,
        owned by root with no write bit, so neither the agent nor the code the tests run can change it.

        Raises:
            SandboxTimeout: past ``timeout_s``.
            SandboxError: missing ``local``, a relative ``remote``, a writable parent (``read_only``), or a
                failed unpack.
        """
        local = Path(local)
        if not local.exists():
            raise SandboxError(f"upload: {local} does not exist")
        if not remote.startswith("/") or remote == "/":
            raise SandboxError(f"upload: remote must be an absolute path below /, got {remote!r}")
        remote = str(PurePosixPath(remote))
        quoted = shell_quote(remote)
        payload, cmd = upload_plan(
            local, remote, owner_uid=0 if read_only else AGENT_UID, read_only=read_only
        )
        if read_only:
            parent = shell_quote(str(PurePosixPath(remote).parent))
            check = (
                f"p={parent}; while :; do s=$(stat -c '%u %a' \"$p\") || exit 3; "
                '[ "${s% *}" = 0 ] && [ $(( 0${s#* } & 022 )) = 0 ] || '
                '{ echo "writable by others: $p" >&2; exit 3; }; '
                '[ "$p" = / ] && break; p=$(dirname "$p"); done'
            )
            result = await self._root(
                f"{check}; rm -rf {quoted} && {cmd} && chown -R 0:0 {quoted}",
                timeout_s=timeout_s,
                stdin=payload,
            )
        else:
            top = shell_quote("/" + PurePosixPath(remote).parts[1])
            made = await self._root(
                f"[ -e {top} ] || {{ mkdir -p {top} && chown {AGENT_UID}:{AGENT_UID} {top}; }}",
                timeout_s=timeout_s,
            )
            if not made.ok:
                raise SandboxError(f"upload {local} -> {remote} failed: {made.stderr.strip()[-1000:]}")
            result = await self.exec(cmd, timeout_s=timeout_s, cwd="/", stdin=payload)
        if result.timed_out:
            raise SandboxTimeout(f"upload {local} -> {remote}: ran past {format_seconds(timeout_s)}")
        if result.exit_code != 0:
            raise SandboxError(f"upload {local} -> {remote} failed: {result.stderr.strip()[-1000:]}")

    async def download(self, remote: str, local: Path, *, timeout_s: float = 60) -> None:
        """Copy ``remote`` out of the container into ``local`` (written by ``tar`` inside, unpacked filtered).

        Raises:
            SandboxTimeout: past ``timeout_s``.
            SandboxError: ``remote`` does not exist or cannot be read.
        """
        if not remote.startswith("/"):
            raise SandboxError(f"download: remote must be an absolute path, got {remote!r}")
        out, err, code, timed_out, _ = await self._launch(
            ["bash", "-c", download_command(remote)],
            timeout_s=timeout_s,
            cwd="/",
            env=ROOT_ENV,
            uid=0,
            gid=0,
            cap=None,
        )
        if timed_out:
            raise SandboxTimeout(f"download {remote}: ran past {format_seconds(timeout_s)}")
        if code != 0:
            raise SandboxError(f"download {remote} failed: {err.decode('utf-8', 'replace').strip()[-1000:]}")
        unpack_download(out, remote, Path(local))

    async def open_shell(self, *, timeout_s: float = 30) -> DockerShell:
        """Open the trial's persistent interactive bash in the task root (one per sandbox).

        Raises:
            SandboxError: not started, closed, or a shell is already open.
            SandboxTimeout: no first prompt within ``timeout_s``.
        """
        if self._id is None or self._closed:
            raise SandboxError("open_shell on a sandbox that is not started or already closed")
        if self._shell is not None and self._shell.alive:
            raise SandboxError("this sandbox already has its persistent shell (one per trial)")
        nonce = new_nonce()
        tag = secrets.token_hex(8)
        env = self._merged_env(prompt_env(nonce))
        bash = ["bash", "--noprofile", "--norc", "--noediting", "-i"]
        cmd = [*LAUNCH, "run", tag, str(AGENT_UID), str(AGENT_UID), "-", self._workdir, "0", "--", *bash]
        api = self._api()
        exec_id = (
            await asyncio.to_thread(
                api.exec_create,
                self._id,
                cmd,
                stdin=True,
                tty=True,
                user="0",
                environment=self._exec_environment(env),
                workdir="/",
            )
        )["Id"]
        sock = await asyncio.to_thread(exec_socket, api, exec_id, tty=True)

        async def exit_code() -> int | None:
            with contextlib.suppress(Exception):
                return (await asyncio.to_thread(api.exec_inspect, exec_id)).get("ExitCode")
            return None

        shell = DockerShell(sock, nonce, exit_code=exit_code, kill=lambda: self._kill_tag(tag))
        try:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(api.exec_resize, exec_id, height=40, width=160)
            await shell.wait_first_prompt(timeout_s)
            launcher = (await asyncio.to_thread(api.exec_inspect, exec_id)).get("Pid")
            # t1run -> bash, on this host only
            await shell.attach_view(BashView.below(launcher, tag=tag, depth=1))
        except BaseException:
            await asyncio.shield(shell.close())
            raise
        self._shell = shell
        return shell

    async def stop_agent(self) -> None:
        """Kill every process of the container but its init (all are the agent's); restore verifier folders.

        The agent may have locked ``/logs``, ``/logs/verifier`` or ``/tmp``; root gives them back (mode 0755,
        ``/tmp`` 1777, the agent's uid as owner of ``/logs``). The WORKDIR the verifier starts in, when still
        a folder and not a link, gets at least mode 0755 (``chmod 000 /app``); removed or replaced, it is left
        so (the verifier's launch then fails on the agent). The task's files stay as the agent left them.
        """
        if self._shell is not None:
            await self._shell.close()
        if self._id is None or self._closed:
            return
        # Root acts on folders the agent could write: a link there (/logs/agent -> /usr/bin) is removed,
        # never followed (chown and chmod would change its target, handing a system folder to the agent).
        folders = "/logs /logs/verifier /logs/agent /logs/artifacts"
        code, err = await self._direct(
            "for i in $(seq 200); do kill -9 -1 2>/dev/null || break; sleep 0.02; done; "
            f"for d in {folders}; do "
            'if [ -L "$d" ] || { [ -e "$d" ] && [ ! -d "$d" ]; }; then rm -f -- "$d" || exit 1; fi; '
            f'mkdir -p -- "$d" && chown -h {AGENT_UID}:{AGENT_UID} -- "$d" && chmod 0755 -- "$d" || exit 1; '
            "done; if [ -L /tmp ]; then rm -f /tmp; fi; "
            "mkdir -p /tmp && chown -h 0:0 /tmp && chmod 1777 /tmp || exit 1; "
            # the folder's own mode only, never its contents; `cd -P` then `.` so no link is ever followed
            f'w={shell_quote(self._workdir)}; if [ ! -L "$w" ] && [ -d "$w" ]; then '
            '{ cd -P -- "$w" && [ "$(pwd -P)" = "$w" ] && chmod u+rwx,go+rx . ; } || true; fi',
            timeout_s=60,
        )
        if code != 0:
            raise SandboxError(
                f"docker sandbox: ending the agent phase failed: {err.decode('utf-8', 'replace')}"
            )

    async def close(self) -> None:
        """Remove the container with every process and file in it; idempotent.

        The removal runs in a worker thread and is waited for even through repeated cancellations (a second
        Ctrl-C), then the cancellation propagates; a removal the daemon refused is retried at exit.

        Raises:
            SandboxError: the daemon refused the removal.
        """
        if self._closed:
            return
        self._closed = True
        if self._shell is not None:
            self._shell.detach()
        await self._remove()

    async def _remove(self) -> None:
        self._closed = True
        if self._id is None:
            return
        container_id, self._id = self._id, None
        removal = asyncio.ensure_future(asyncio.to_thread(dc.remove_container, container_id, self.host))
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
