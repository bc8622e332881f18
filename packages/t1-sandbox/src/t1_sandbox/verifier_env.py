"""The verifier's lean environment: a ``site-packages`` holding pytest, its report plugin and what they need.

A task's ``test.sh`` runs pytest with the verifier toolchain's Python (``t1_sandbox.local.toolchain``).
Pointed at the project's own ``site-packages``, that pytest would load every pytest plugin installed there
through its entry points (hypothesis, pytest-asyncio, anyio, platformdirs): seconds more per start,
and plugins that can change what the task's tests do (test order, warnings, fixtures). `lean_site` builds,
once per machine, a folder holding only `ROOTS` and their dependencies (`distributions`): their files as
their ``RECORD`` lists them, copied from this interpreter's installed distributions (so nothing is
downloaded: it works offline), compiled to bytecode for the path where the sandbox mounts them (the sandbox
sees the folder read-only and could not write bytecode itself). A distribution that is not installed stops
the build with an error naming it and the command that installs it.
"""

from __future__ import annotations

import compileall
import hashlib
import importlib.metadata
import os
import re
import shutil
import sys
import warnings
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from t1_sandbox.base import SandboxError

__all__ = ["INSTALL_HINT", "ROOTS", "distributions", "lean_site"]

#: What a task's verifier may use besides the standard library: pytest and the CTRF report plugin that
#: Terminal-Bench 2 and T1's own task scripts ask for (``--ctrf``).
ROOTS = ("pytest", "pytest-json-ctrf")
#: The command that installs the project's environment, `ROOTS` included (``t1-sandbox`` depends on them).
INSTALL_HINT = "uv sync --all-packages (in the T1 repository; t1-sandbox depends on both)"
_LAYOUT = "lean-site-1"  # bumped when the folder's layout changes, so an old cache entry is not reused


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def distributions(roots: tuple[str, ...] = ROOTS) -> tuple[importlib.metadata.Distribution, ...]:
    """The installed distributions of ``roots`` and of everything they require on this interpreter.

    Requirements are followed through their ``Requires-Dist`` metadata; one whose environment marker is
    false here (another platform, an older Python, an ``extra``) is left out. Sorted by normalized name.

    Raises:
        SandboxError: a distribution is not installed (the message names it, who needs it, and
            `INSTALL_HINT`), or its metadata lists no files (an editable or damaged install).
    """
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = [(name, "the verifier") for name in roots]
    while todo:
        name, needed_by = todo.pop()
        key = _normal(name)
        if key in found:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            raise SandboxError(
                f"verifier environment: distribution {name!r} (needed by {needed_by}) is not installed for "
                f"{sys.executable}; install it with: {INSTALL_HINT}"
            ) from None
        if not dist.files:
            raise SandboxError(
                f"verifier environment: distribution {name!r} at {dist.locate_file('')} lists no files "
                f"(no RECORD: an editable or damaged install); reinstall it with: {INSTALL_HINT}"
            )
        found[key] = dist
        for text in dist.requires or ():
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue  # a malformed line in a third-party METADATA: nothing T1 could follow
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append((req.name, dist.metadata["Name"]))
    return tuple(found[k] for k in sorted(found))


def _key(dists: tuple[importlib.metadata.Distribution, ...], mount: str) -> str:
    parts = [sys.version, mount, _LAYOUT, *(f"{d.metadata['Name']}=={d.version}" for d in dists)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _fill(tmp: Path, dists: tuple[importlib.metadata.Distribution, ...], mount: str) -> None:
    tmp.mkdir(mode=0o755)
    for dist in dists:
        for file in dist.files or ():
            if file.parts[0] in ("..", "/") or "__pycache__" in file.parts:
                continue  # console scripts outside site-packages; bytecode is made below, for ``mount``
            src = Path(str(dist.locate_file(file)))
            if not src.is_file():
                continue  # a RECORD entry that the install did not keep
            dest = tmp / file.as_posix()
            dest.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            shutil.copy2(src, dest)  # a copy, not a link: the modes below must not change the host's files
            os.chmod(dest, 0o644)
    with warnings.catch_warnings():  # a package's own test data may warn on compile; nothing to act on
        warnings.simplefilter("ignore")
        compileall.compile_dir(tmp, ddir=mount, quiet=2, workers=1, legacy=False)
    for root, dirs, files in os.walk(tmp):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)
    os.chmod(tmp, 0o755)


def lean_site(cache_root: Path, mount: str) -> Path:
    """The host folder of the verifier's lean ``site-packages``, built once and cached under ``cache_root``.

    Args:
        cache_root: the host cache folder (created, mode 0755); the result is ``cache_root/site-<hash>``,
            keyed by this Python, ``mount`` and every distribution's version, so an upgrade builds anew.
        mount: the path where the sandbox mounts the folder (the bytecode's recorded source path).

    Returns:
        The folder: world-readable, holding only the `distributions` of `ROOTS` (their packages and
        ``.dist-info`` folders, with bytecode). Built in a temporary sibling and renamed into place, so
        concurrent builders are safe.

    Raises:
        SandboxError: as `distributions`, or the folder could not be written (the cause is named).
    """
    dists = distributions()
    dest = cache_root / f"site-{_key(dists, mount)}"
    if dest.is_dir():
        return dest
    cache_root.mkdir(mode=0o755, parents=True, exist_ok=True)
    tmp = cache_root / f".{dest.name}.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        _fill(tmp, dists, mount)
        os.rename(tmp, dest)
    except OSError as exc:
        if not dest.is_dir():  # not another builder's win: a real failure
            shutil.rmtree(tmp, ignore_errors=True)
            raise SandboxError(f"verifier environment: could not build {dest}: {exc}") from exc
    shutil.rmtree(tmp, ignore_errors=True)
    return dest
