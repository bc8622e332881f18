"""Building a task's environment on the host from its Dockerfile, for the local sandbox (no image store).

The instructions come from the backend-neutral parser (``sandbox/dockerfile.py``, the subset FROM
debian:bookworm[-slim], WORKDIR, COPY, ENV, RUN). ``FROM`` maps onto the host's own read-only userland; the
first ``WORKDIR`` becomes the sandbox's private writable task root; ``COPY`` copies from the build context
into the sandbox's host directories (then owned by its uid); ``ENV`` sets the environment of every later exec
and of the shell; ``RUN`` runs inside the sandbox with the build's remaining time as its deadline.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

from t1_rollout.sandbox.base import (
    SandboxError,
    SandboxTimeout,
    UnsupportedDockerfileInstruction,
    format_seconds,
)
from t1_rollout.sandbox.dockerfile import Instruction
from t1_rollout.sandbox.local.bwrap import inner_path, is_under
from t1_rollout.sandbox.local.uids import UidSlot

__all__ = ["DockerfileBuild"]


class DockerfileBuild:
    """The build side of ``LocalSandbox``: applies parsed Dockerfile instructions to the sandbox's files.

    A mixin: ``LocalSandbox`` holds the state it changes (the mount table ``_mounts`` under ``_root``, the
    task root, the working directory, the environment) and provides ``_add_mount``, ``_host_path`` and
    ``exec``.
    """

    _slot: UidSlot | None
    _root: Path | None
    _mounts: dict[str, Path]
    _task_root: str
    _workdir: str
    _env: dict[str, str]

    async def _build(
        self, instructions: Sequence[Instruction], environment_dir: Path, dockerfile: Path, timeout_s: float
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
                path = inner_path(path if path.startswith("/") else os.path.join(self._workdir, path), where)
                if not root_set and path not in self._mounts:
                    if any(is_under(path, m) for m in self._mounts):
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
        dest_inner = inner_path(dest if dest.startswith("/") else os.path.join(self._workdir, dest), where)
        dest_host = self._host_path(dest_inner, where)
        many = len(sources) > 1 or dest.endswith("/")
        for src in sources:
            src_host = (context / src).resolve()
            if not is_under(str(src_host), str(context)) or not src_host.exists():
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
