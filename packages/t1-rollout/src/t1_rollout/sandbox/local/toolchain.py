"""The verifier toolchain and what no sandbox launch may see: T1's installed task bundles.

The toolchain is the project's Python with pytest, mounted read-only into the verifier's launch only
(``LocalSandbox.exec_verifier``), never into the agent's shell or execs. It is built on the host (as the host
user, root in CI) outside any sandbox, once per process, and cached on disk. `bundle_masks` lists the
directories of T1 packages that ship task bundles (the ``t1-tasks`` wheel's pools, with held-out tests and
reference solutions) found under a path that every launch binds (``/usr``, ``/etc``) or under the
toolchain's ``site-packages``; each launch covers them with an empty read-only tmpfs.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from t1_rollout.sandbox.base import SandboxError

__all__ = ["TOOLCHAIN_MOUNT", "VerifierToolchain", "bundle_masks", "toolchain"]


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
    site: str = ""
    """The host directory of the environment's ``site-packages`` (at ``/opt/t1-verifier/site-packages``)."""


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
    _TOOLCHAIN = VerifierToolchain(binds=tuple(binds), symlinks=symlinks, env=env, site=str(site))
    return _TOOLCHAIN


#: Host paths every launch binds read-only at their own path (``bwrap.py``): a package there is seen.
BOUND_SYSTEM_PATHS = ("/usr", "/etc")
_SITE_GLOBS = (
    "/usr/lib/python3*/*-packages",
    "/usr/local/lib/python3*/*-packages",
    "/usr/lib/python3/*-packages",
)


def _holds_bundles(package: Path) -> bool:
    return package.name == "t1_tasks" or (package / "pools").is_dir()


def bundle_masks(*, verifier: bool) -> tuple[str, ...]:
    """Sandbox paths of T1 packages holding task bundles that a launch would otherwise see; sorted.

    A package holds bundles when it is ``t1_tasks`` or has a ``pools`` directory. Searched: the system
    Python's ``site-packages`` / ``dist-packages`` under ``/usr`` and ``/usr/local``, wherever the running
    ``t1_tasks`` is installed when that is under ``/usr`` or ``/etc`` (a wheel in a system venv), and, for the
    verifier's launch (``verifier=True``), the toolchain's ``site-packages`` at its sandbox path. Cheap: a few
    ``glob`` calls, no import.
    """
    found: set[str] = set()
    sites = [Path(d) for pattern in _SITE_GLOBS for d in glob.glob(pattern)]
    spec = importlib.util.find_spec("t1_tasks")
    for location in (spec.submodule_search_locations or []) if spec else []:
        sites.append(Path(location).resolve().parent)
    for site in sites:
        real = site.resolve()
        if not any(real == Path(b) or Path(b) in real.parents for b in BOUND_SYSTEM_PATHS):
            continue
        for package in real.glob("t1_*"):
            if package.is_dir() and _holds_bundles(package):
                found.add(str(package))
    if verifier:
        tc = toolchain()
        for package in Path(tc.site).glob("t1_*"):
            if package.is_dir() and _holds_bundles(package):
                found.add(f"{TOOLCHAIN_MOUNT}/site-packages/{package.name}")
    return tuple(sorted(found))
