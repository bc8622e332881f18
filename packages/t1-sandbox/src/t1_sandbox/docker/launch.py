"""Launches in a Docker sandbox's container: one command under the launcher, its kill, root's direct execs.

A mixin of ``DockerSandbox`` (which provides ``_id``, ``_closed``, ``_api`` and ``_merged_env``): every
launch is a ``docker exec`` as the container's root of ``t1run.py run``, which drops to the requested uid and
gid, keeps everything the command starts below itself and kills it at the command's exit. At a deadline or a
cancellation the launch's tag names the launcher to kill (``/run/t1/<tag>``), whose subtree dies with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from typing import Any

from t1_sandbox.base import ExecResult, SandboxError
from t1_sandbox.docker.stream import Frames, exec_socket
from t1_sandbox.docker.toolchain import LAUNCH, NOT_INHERITED

__all__ = ["ROOT_ENV", "Launches"]

#: The whole environment of every command T1 runs as the container's root: a fixed system ``PATH`` (the
#: image's may name a folder the agent can write) and root's own ``HOME``, nothing the agent chose (nor the
#: image's ``BASH_ENV`` or ``LD_LIBRARY_PATH``: `NOT_INHERITED`).
ROOT_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8", **NOT_INHERITED}


#: The variable by which the launcher gets the command's own ``LD_LIBRARY_PATH`` (``t1run.py``): the exec's is
#: empty, as the container's is, so that the launcher (root until it drops to the command's uid) loads no
#: library from a folder the agent can write; the command gets this one back.
COMMAND_LIBRARY_PATH = "T1_RUN_LD_LIBRARY_PATH"


class Launches:
    """Launch helpers of ``DockerSandbox`` (see the module docstring)."""

    _id: str | None
    _closed: bool
    #: The image's ``LD_LIBRARY_PATH`` (its ``ENV``), what the agent's commands get; the container's is empty.
    _image_library_path: str = ""

    def _exec_environment(self, env: dict[str, str]) -> list[str]:
        """``env`` as the exec's environment: ``LD_LIBRARY_PATH`` moved to `COMMAND_LIBRARY_PATH`.

        The command's is ``env``'s when it names one (``ROOT_ENV`` and the verifier's: empty), else the
        image's.
        """
        library_path = env.get("LD_LIBRARY_PATH", self._image_library_path)
        env = {**env, "LD_LIBRARY_PATH": "", COMMAND_LIBRARY_PATH: library_path}
        return [f"{k}={v}" for k, v in env.items()]

    def _api(self) -> Any:
        raise NotImplementedError

    def _merged_env(self, env: dict[str, str] | None) -> dict[str, str]:
        raise NotImplementedError

    async def _launch(
        self,
        argv: list[str],
        *,
        timeout_s: float,
        cwd: str,
        env: dict[str, str],
        uid: int,
        gid: int,
        stdin: bytes | None = None,
        cpu_time_s: float | None = None,
        cap: int | None = 8 * 1024 * 1024,
    ) -> tuple[bytes, bytes, int | None, bool, float]:
        if self._id is None or self._closed:
            raise SandboxError("exec on a sandbox that is not started (call start) or already closed")
        tag = secrets.token_hex(8)
        cpu = "-" if cpu_time_s is None else repr(float(cpu_time_s))
        cmd = [*LAUNCH, "run", tag, str(uid), str(gid), cpu, cwd, "1", "--", *argv]
        api = self._api()
        started = time.monotonic()
        exec_id = (
            await asyncio.to_thread(
                api.exec_create,
                self._id,
                cmd,
                stdin=stdin is not None,
                user="0",
                environment=self._exec_environment(env),
                workdir="/",
            )
        )["Id"]
        sock = await asyncio.to_thread(exec_socket, api, exec_id, tty=False)
        frames = Frames(cap)
        timed_out = False
        try:
            await asyncio.wait_for(frames.pump(sock, stdin), timeout=timeout_s)
        except TimeoutError:
            timed_out = True
            await self._kill_tag(tag)
        except BaseException:  # cancelled: what it started must not outlive the call
            await asyncio.shield(self._kill_tag(tag))
            raise
        finally:
            sock.close()
        duration = time.monotonic() - started
        code = None if timed_out else (await asyncio.to_thread(api.exec_inspect, exec_id)).get("ExitCode")
        return frames.stdout, frames.stderr, code, timed_out, duration

    async def _kill_tag(self, tag: str) -> None:
        """Kill one launch and everything below it (its launcher kills its subtree on SIGTERM)."""
        if self._id is None:
            return
        with contextlib.suppress(Exception):
            await self._direct(
                f'kill -TERM "$(cat /run/t1/{tag} 2>/dev/null)" 2>/dev/null; true', timeout_s=10
            )

    async def _direct(self, script: str, *, timeout_s: float) -> tuple[int | None, bytes]:
        """Run ``bash -c script`` as the container's root without the launcher (kills, the folder restore)."""
        api = self._api()
        environment = [f"{k}={v}" for k, v in ROOT_ENV.items()]
        exec_id = (
            await asyncio.to_thread(
                api.exec_create, self._id, ["bash", "-c", script], user="0", environment=environment
            )
        )["Id"]
        sock = await asyncio.to_thread(exec_socket, api, exec_id, tty=False)
        frames = Frames(64 * 1024)
        try:
            await asyncio.wait_for(frames.pump(sock, None), timeout=timeout_s)
        finally:
            sock.close()
        return (await asyncio.to_thread(api.exec_inspect, exec_id)).get("ExitCode"), frames.stderr

    async def _root(self, command: str, *, timeout_s: float, stdin: bytes | None = None) -> ExecResult:
        out, err, code, timed_out, duration = await self._launch(
            ["bash", "-c", command],
            timeout_s=timeout_s,
            cwd="/",
            env=ROOT_ENV,
            uid=0,
            gid=0,
            stdin=stdin,
            cap=None,
        )
        return ExecResult(
            out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), code, timed_out, duration
        )
