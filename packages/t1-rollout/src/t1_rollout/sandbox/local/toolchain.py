"""The verifier toolchain: the project's Python with pytest, mounted read-only into every local sandbox.

Built on the host (as the host user, root in CI) outside any sandbox, once per process, and cached on disk.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from t1_rollout.sandbox.base import SandboxError

__all__ = ["TOOLCHAIN_MOUNT", "VerifierToolchain", "toolchain"]


@dataclass(frozen=True)
class VerifierToolchain:
    """The project's Python with pytest and pytest-json-ctrf, mounted read-only for the verifier.

    Attributes:
        binds: ``(host_path, sandbox_path)`` read-only binds.
        symlinks: ``(target, sandbox_path)`` symlinks created in the sandbox.
        env: variables that put it first on PATH (``python3 -m pytest`` then resolves to it).
    """

    binds: tuple[tuple[str, str], ...]
    symlinks: tuple[tuple[str, str], ...]
    env: dict[str, str]


TOOLCHAIN_MOUNT = "/opt/t1-verifier"
_TOOLCHAIN: VerifierToolchain | None = None


def _world_reachable(path: Path) -> bool:
    """Whether any uid may traverse to ``path`` and read it (every ancestor has o+x, the path o+rx)."""
    try:
        if path.stat().st_mode & 0o005 != 0o005:
            return False
        return all(p.stat().st_mode & 0o001 for p in path.parents)
    except OSError:
        return False


def _mirror(src: Path, cache_root: Path, skip: tuple[str, ...] = ("site-packages", "__pycache__")) -> Path:
    """A world-readable hard-link mirror of ``src`` (the base interpreter may live under a 0700 home).

    Hard links share the inodes (no copy, milliseconds); falls back to copying across file systems. The
    mirror is built in a temporary directory and renamed into place, so concurrent builders are safe.
    """
    key = hashlib.sha256(f"{src}:{src.stat().st_mtime_ns}:{sys.version}:{skip}".encode()).hexdigest()[:16]
    dest = cache_root / key
    if dest.is_dir():
        return dest
    cache_root.mkdir(mode=0o755, parents=True, exist_ok=True)
    tmp = cache_root / f".{key}.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)

    def link(s: str, d: str) -> None:
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    shutil.copytree(
        src,
        tmp,
        symlinks=True,
        copy_function=link,
        ignore=shutil.ignore_patterns("site-packages", "__pycache__"),
    )
    for root, dirs, _ in os.walk(tmp):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)
    os.chmod(tmp, 0o755)
    try:
        os.rename(tmp, dest)
    except OSError:  # another process won the race
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def toolchain() -> VerifierToolchain:
    """The verifier toolchain for this interpreter (built once per process, cached on disk).

    The base interpreter (``sys.base_prefix``) is mounted at its own path (its binary's RPATH points there)
    from a world-readable mirror; the environment's ``site-packages`` (pytest, pytest-json-ctrf) at
    ``/opt/t1-verifier/site-packages`` and put on ``PYTHONPATH``. Only ``site-packages`` is mounted, never the
    repository: editable installs' ``.pth`` files are not processed from ``PYTHONPATH`` and their targets do
    not exist inside the sandbox, so task bundles (tests, solutions) stay invisible.
    """
    global _TOOLCHAIN
    if _TOOLCHAIN is not None:
        return _TOOLCHAIN
    import pytest  # noqa: F401 - fail early and clearly if the toolchain lacks pytest

    base = Path(sys.base_prefix).resolve()
    site = Path(pytest.__file__).resolve().parent.parent
    cache = Path("/var/tmp/t1-toolchain")
    binds: list[tuple[str, str]] = []
    if str(base) != "/usr" and not str(base).startswith("/usr/"):  # /usr is bound anyway
        # mounted at its own path; mirrored when the sandbox uid cannot reach it (e.g. under a 0700 /root)
        binds.append((str(base if _world_reachable(base) else _mirror(base, cache)), str(base)))
    site_src = site if _world_reachable(site) else _mirror(site, cache, skip=("__pycache__",))
    binds.append((str(site_src), f"{TOOLCHAIN_MOUNT}/site-packages"))
    exe = base / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    if not exe.exists():
        raise SandboxError(f"verifier toolchain: interpreter {exe} not found")
    symlinks = ((str(exe), f"{TOOLCHAIN_MOUNT}/bin/python3"), (str(exe), f"{TOOLCHAIN_MOUNT}/bin/python"))
    env = {
        "PATH": f"{TOOLCHAIN_MOUNT}/bin:/usr/local/bin:/usr/bin:/bin",
        "PYTHONPATH": f"{TOOLCHAIN_MOUNT}/site-packages",
        "PYTHONNOUSERSITE": "1",
    }
    _TOOLCHAIN = VerifierToolchain(binds=tuple(binds), symlinks=symlinks, env=env)
    return _TOOLCHAIN
