"""Building a task's environment on the host from its Dockerfile, for the local sandbox (no image store).

The instructions come from the backend-neutral parser (``sandbox/dockerfile.py``, the subset FROM
debian:bookworm[-slim], WORKDIR, COPY, ENV, RUN). ``FROM`` maps onto the host's own read-only userland; the
first ``WORKDIR`` becomes the sandbox's private writable task root; ``COPY`` copies from the build context
into the sandbox's host directories (then owned by its uid); ``ENV`` sets the environment of every later exec
and of the shell; ``RUN`` runs inside the sandbox with the build's remaining time as its deadline.

A ``RUN`` step may have planted links (``RUN ln -s /etc /app/l``), so the host-side ``COPY`` and ``WORKDIR``
go through ``hostfs.py``: they walk the sandbox's directories without following any link and refuse a
destination through one, where Docker would resolve it inside the image; a link inside the build context is
copied as a link.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from t1_sandbox.base import (
    SandboxError,
    SandboxTimeout,
    UnsupportedDockerfileInstruction,
    format_seconds,
)
from t1_sandbox.dockerfile import Instruction
from t1_sandbox.local.bwrap import inner_path, is_under
from t1_sandbox.local.environment import DOCKER_HINT, run_step_hint
from t1_sandbox.local.hostfs import copy_inside, make_dirs_inside
from t1_sandbox.local.uids import UidSlot

__all__ = ["DockerfileBuild"]

_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


class DockerfileBuild:
    """The build side of ``LocalSandbox``: applies parsed Dockerfile instructions to the sandbox's files.

    A mixin: ``LocalSandbox`` holds the state it changes (the mount table ``_mounts`` under ``_root``, the
    task root, the working directory, the environment) and provides ``_add_mount`` and ``exec``.
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
                before = dict(self._env)  # as Docker: $NAME and ${NAME} take the values before this line
                for key, value in zip(ins.args[::2], ins.args[1::2], strict=True):
                    self._env[key] = _VAR.sub(lambda m, b=before: b.get(m[1] or m[2], ""), value)
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
                    mount, parts = self._mount_parts(path, where)
                    make_dirs_inside(mount, parts, uid=self._slot.uid, where=f"{where}: WORKDIR {path}")
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
                    why = run_step_hint(ins.args[0])
                    cause = f"; this step {why}; {DOCKER_HINT}" if why else ""
                    raise SandboxError(
                        f"{where}: RUN exited {result.exit_code}: {ins.args[0]!r}{cause}\n{tail}"
                    )
        if not root_set:
            self._add_mount(self._task_root)
        self._workdir = self._workdir if root_set else self._task_root

    def _mount_parts(self, inner: str, where: str) -> tuple[Path, list[str]]:
        """The host mount holding the sandbox path ``inner`` and the components of ``inner`` below it.

        Raises:
            SandboxError: ``inner`` is outside every writable mount.
        """
        for mount in sorted(self._mounts, key=len, reverse=True):
            if is_under(inner, mount):
                rel = PurePosixPath(inner).relative_to(mount)
                return self._mounts[mount], [p for p in rel.parts if p != "."]
        raise SandboxError(f"{where}: {inner} is outside the writable mounts {sorted(self._mounts)}")

    def _copy_in(self, context: Path, sources: Sequence[str], dest: str, where: str) -> None:
        """``COPY sources dest`` from the build context, never following a link in the sandbox's files.

        Raises:
            SandboxError: a source outside the context or missing, or a destination through a link.
        """
        assert self._slot is not None
        context = context.resolve()
        dest_inner = inner_path(dest if dest.startswith("/") else os.path.join(self._workdir, dest), where)
        mount, parts = self._mount_parts(dest_inner, where)
        many = len(sources) > 1 or dest.endswith("/")
        for src in sources:
            src_host = (context / src).resolve()
            if not is_under(str(src_host), str(context)):
                raise SandboxError(_outside_context(context, src, src_host, where))
            if not src_host.exists():
                raise SandboxError(f"{where}: COPY source {src!r} not found in {context}")
            copy_inside(src_host, mount, parts, uid=self._slot.uid, into=many, where=f"{where}: COPY {dest}")


def _outside_context(context: Path, src: str, resolved: Path, where: str) -> str:
    """Why ``COPY src`` is refused when it resolves outside the build context: the link, or ``..``."""
    here = context
    for part in Path(src).parts:
        here = here / part
        if here.is_symlink():
            return (
                f"{where}: COPY source {src!r}: {here} is a link to {os.readlink(here)} (resolves to "
                f"{resolved}), outside the build context {context}; links outside the bundle are not followed"
            )
    return f"{where}: COPY source {src!r} resolves to {resolved}, outside the build context {context}"
