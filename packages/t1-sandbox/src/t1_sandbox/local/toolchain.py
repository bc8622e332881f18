"""The verifier toolchain and what no sandbox launch may see: T1's installed task bundles.

The toolchain is the project's Python interpreter with a lean ``site-packages`` (pytest, pytest-json-ctrf and
what they need, nothing else: ``t1_sandbox.verifier_env``), plus ``uv`` and ``uvx`` (the ``uv`` PyPI package's
binaries), mounted read-only into the verifier's launch only (``LocalSandbox.exec_verifier``), never into the
agent's shell or execs. Its ``bin`` holds ``python3``, ``python``, ``pytest``, ``uv`` and ``uvx``, so a Harbor
``test.sh`` that calls ``pytest`` or ``uvx`` directly finds them (Harbor's task template does). It is built on
the host (as the host user, root in CI) outside any sandbox, once per process, and cached on disk; the
interpreter's standard library keeps its bytecode (``__pycache__``, compiled once at build time, read-only
after), so the verifier's Python does not recompile it on every start. The verifier's import guard
(``sandbox/verifier_site/sitecustomize.py``, at ``/opt/t1-verifier/guard``, alone on ``PYTHONPATH``) keeps the
working directory off every pytest process's module path, so an agent's ``/app/pytest.py`` or ``/app/ctrf/``
is never the grader (its docstring says how). `bundle_masks` lists the directories of T1 packages that ship
task bundles (the ``t1-tasks`` wheel's pools, with held-out tests and reference solutions) found under a path
that every launch binds (``/usr``, ``/etc``) or under the toolchain's ``site-packages``; each launch covers
them with an empty read-only tmpfs.
"""

from __future__ import annotations

import compileall
import glob
import hashlib
import importlib.util
import os
import py_compile
import shutil
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from t1_sandbox.base import SandboxError
from t1_sandbox.verifier_env import lean_site

__all__ = [
    "FALLBACK_SITE_VARIABLE",
    "GUARD_SOURCE",
    "TOOLCHAIN_MOUNT",
    "VerifierToolchain",
    "bundle_masks",
    "toolchain",
]


@dataclass(frozen=True)
class VerifierToolchain:
    """The project's Python with only pytest and pytest-json-ctrf, and uv, mounted read-only for the verifier.

    Attributes:
        binds: ``(host_path, sandbox_path)`` read-only binds (the interpreter, ``site-packages``, ``bin``).
        symlinks: ``(target, sandbox_path)`` symlinks created in the sandbox (none: ``bin`` holds its own).
        env: variables that put it first on PATH (``python3 -m pytest``, ``pytest``, ``uvx`` resolve to it)
            and make ``uv`` use its interpreter (``UV_PYTHON``) and never download one.
    """

    binds: tuple[tuple[str, str], ...]
    symlinks: tuple[tuple[str, str], ...]
    env: dict[str, str]
    site: str = ""
    """The host directory of the lean ``site-packages`` (``verifier_env.lean_site``), mounted at
    ``/opt/t1-verifier/site-packages``."""


TOOLCHAIN_MOUNT = "/opt/t1-verifier"
#: Where uv keeps its state in every verifier launch (any backend): ``run_verifier`` empties it before
#: ``test.sh``. With ``UV_NO_CONFIG`` uv reads no ``uv.toml`` or ``pyproject.toml`` (the agent's ``/app``,
#: its ``~/.config/uv``), and no cache, installed tool or managed Python under the agent's ``HOME``: pointed
#: at the agent's own wheels or interpreter, ``uvx`` would install or run the grader the agent chose.
VERIFIER_UV_DIR = "/tmp/t1-verifier-uv"
UV_ISOLATION = {
    "UV_NO_CONFIG": "1",
    "UV_CACHE_DIR": f"{VERIFIER_UV_DIR}/cache",
    "UV_TOOL_DIR": f"{VERIFIER_UV_DIR}/tools",
    "UV_TOOL_BIN_DIR": f"{VERIFIER_UV_DIR}/bin",
    "UV_PYTHON_INSTALL_DIR": f"{VERIFIER_UV_DIR}/python",
}
#: The variable naming the toolchain's lean ``site-packages`` to the guard, which appends it last to
#: ``sys.path`` in a process that finds no pytest of its own (``SITE_VARIABLE`` of `GUARD_SOURCE`).
FALLBACK_SITE_VARIABLE = "T1_VERIFIER_SITE"
#: The verifier's import guard, alone on the verifier's ``PYTHONPATH`` on each backend with a toolchain.
GUARD_SOURCE = Path(__file__).resolve().parents[1] / "verifier_site" / "sitecustomize.py"
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

    Hard links share the inodes (no copy, milliseconds); falls back to copying across file systems. Entries
    named in ``skip`` are left out. When ``__pycache__`` is kept, every ``.py`` file of the mirror is
    compiled once here (stale or missing bytecode only; ``py_compile`` replaces a file, so the host's own
    bytecode is never written through a link): the sandbox sees the mirror read-only and could not write
    it. The mirror is built in a temporary directory and renamed into place, so concurrent builders are safe.
    """
    key = hashlib.sha256(f"{src}:{src.stat().st_mtime_ns}:{sys.version}:{skip}".encode()).hexdigest()[:16]

    def link(s: str, d: str) -> None:
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    def fill(tmp: Path) -> None:
        shutil.copytree(src, tmp, symlinks=True, copy_function=link, ignore=shutil.ignore_patterns(*skip))
        if "__pycache__" not in skip:
            # ddir: tracebacks name the real path, where the mirror is mounted; in-process (no worker pool
            # inside a caller's event loop); what the host already compiled is linked, not redone
            with warnings.catch_warnings():  # the standard library's own test data warns; nothing to act on
                warnings.simplefilter("ignore")
                compileall.compile_dir(tmp, ddir=str(src), quiet=2, workers=1, legacy=False)
        for root, dirs, _ in os.walk(tmp):
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o755)
        os.chmod(tmp, 0o755)

    return _build_once(cache_root / key, fill)


def _build_once(dest: Path, fill: Callable[[Path], None]) -> Path:
    """``dest``, made once: ``fill(tmp)`` creates a temporary sibling, which is then renamed into place.

    Concurrent builders are safe: the first rename wins, and a loser's copy is removed.
    """
    if dest.is_dir():
        return dest
    dest.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    fill(tmp)
    try:
        os.rename(tmp, dest)
    except OSError:  # another process won the race
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


# pytest's own console entry point (``_pytest.config._console_main`` since pytest 9, ``console_main`` before).
_PYTEST_SCRIPT = """#!{python}
import sys
try:
    from _pytest.config import _console_main as main
except ImportError:
    from pytest import console_main as main
sys.exit(main())
"""
_UVX_SCRIPT = """#!/bin/sh
exec {bin}/uv tool run "$@"
"""


def _bin_dir(cache_root: Path, exe: Path) -> Path:
    """The toolchain's ``bin`` (mounted at ``/opt/t1-verifier/bin``): python3, python, pytest, uv, uvx.

    ``python3`` and ``python`` link to the interpreter at its sandbox path; ``pytest`` is a script run by
    it; ``uv`` and ``uvx`` are the ``uv`` PyPI package's binaries (``uv.find_uv_bin``), hard-linked or
    copied; when the package ships no ``uvx`` beside ``uv``, ``uvx`` is a script that runs ``uv tool run``.
    Built in a temporary directory and renamed into place; cached by the interpreter and the uv binary.

    Raises:
        SandboxError: the ``uv`` package or its binary is missing.
    """
    try:
        import uv

        uv_bin = Path(uv.find_uv_bin())
    except (ImportError, FileNotFoundError) as exc:
        raise SandboxError(f"verifier toolchain: the uv package's binary is missing ({exc})") from exc
    uvx_bin = uv_bin.with_name("uvx")
    stamp = f"{exe}:{uv_bin}:{uv_bin.stat().st_mtime_ns}:{uvx_bin.is_file()}:{sys.version}:bin-v1"

    def fill(tmp: Path) -> None:
        tmp.mkdir(mode=0o755)
        for name in ("python3", "python"):
            os.symlink(str(exe), tmp / name)
        (tmp / "pytest").write_text(_PYTEST_SCRIPT.format(python=f"{TOOLCHAIN_MOUNT}/bin/python3"))
        for name, src in (("uv", uv_bin), ("uvx", uvx_bin)):
            if name == "uvx" and not src.is_file():
                (tmp / name).write_text(_UVX_SCRIPT.format(bin=f"{TOOLCHAIN_MOUNT}/bin"))
                continue
            try:
                os.link(src, tmp / name)
            except OSError:
                shutil.copy2(src, tmp / name)
        for name in ("pytest", "uvx", "uv"):
            os.chmod(tmp / name, 0o755)
        os.chmod(tmp, 0o755)

    return _build_once(cache_root / f"bin-{hashlib.sha256(stamp.encode()).hexdigest()[:16]}", fill)


def _guard_dir(cache_root: Path) -> Path:
    """A world-readable folder holding only the verifier's ``sitecustomize.py`` (`GUARD_SOURCE`), cached."""
    text = GUARD_SOURCE.read_bytes()

    def fill(tmp: Path) -> None:
        tmp.mkdir(mode=0o755)
        (tmp / "sitecustomize.py").write_bytes(text)
        os.chmod(tmp / "sitecustomize.py", 0o644)
        # compiled here: the sandbox sees the folder read-only, and every verifier Python imports it at start
        py_compile.compile(str(tmp / "sitecustomize.py"), dfile=f"{TOOLCHAIN_MOUNT}/guard/sitecustomize.py")
        for d in (tmp / "__pycache__", tmp):
            os.chmod(d, 0o755)
        for pyc in (tmp / "__pycache__").iterdir():
            os.chmod(pyc, 0o644)

    return _build_once(
        cache_root / f"guard-{hashlib.sha256(text + sys.version.encode()).hexdigest()[:16]}", fill
    )


def toolchain() -> VerifierToolchain:
    """The verifier toolchain for this interpreter (built once per process, cached on disk).

    The base interpreter (``sys.base_prefix``) is mounted at its own path (its binary's RPATH points there)
    from a world-readable mirror that keeps the standard library's bytecode; a lean ``site-packages`` holding
    only pytest, pytest-json-ctrf and their dependencies (``verifier_env.lean_site``, built once per machine
    from the installed distributions, with bytecode) at ``/opt/t1-verifier/site-packages``, named by
    `FALLBACK_SITE_VARIABLE`: the guard appends it to the end of ``sys.path`` of a process that has no pytest
    of its own (a bare ``pytest``), so a task's pytest loads no plugin of the project's environment
    (hypothesis, pytest-asyncio, anyio, platformdirs), and an environment's own pytest and plugins (uvx's, a
    venv's) take precedence over it; ``bin`` (python3, python, pytest, uv, uvx: `_bin_dir`) at
    ``/opt/t1-verifier/bin``, first on ``PATH``; the import guard (`GUARD_SOURCE`, compiled) at
    ``/opt/t1-verifier/guard``, alone on ``PYTHONPATH``. Only ``site-packages`` is mounted, never the
    repository: editable installs' ``.pth`` files are not processed from an appended ``sys.path`` entry and
    their targets do not exist inside the sandbox, so task bundles (tests, solutions) stay invisible.

    Raises:
        SandboxError: the interpreter binary or the ``uv`` package's binary is missing, or a distribution of
            the lean ``site-packages`` is not installed (named, with the command that installs it).
    """
    global _TOOLCHAIN
    if _TOOLCHAIN is not None:
        return _TOOLCHAIN
    base = Path(sys.base_prefix).resolve()
    cache = Path("/var/tmp/t1-toolchain")
    site = lean_site(cache, f"{TOOLCHAIN_MOUNT}/site-packages")
    binds: list[tuple[str, str]] = []
    if str(base) != "/usr" and not str(base).startswith("/usr/"):  # /usr is bound anyway
        # mounted at its own path; mirrored when the sandbox uid cannot reach it (e.g. under a 0700 /root)
        src = base if _world_reachable(base) else _mirror(base, cache, skip=("site-packages",))
        binds.append((str(src), str(base)))
    binds.append((str(site), f"{TOOLCHAIN_MOUNT}/site-packages"))  # world-readable as built
    exe = base / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    if not exe.exists():
        raise SandboxError(f"verifier toolchain: interpreter {exe} not found")
    binds.append((str(_bin_dir(cache, exe)), f"{TOOLCHAIN_MOUNT}/bin"))
    binds.append((str(_guard_dir(cache)), f"{TOOLCHAIN_MOUNT}/guard"))
    env = {
        "PATH": f"{TOOLCHAIN_MOUNT}/bin:/usr/local/bin:/usr/bin:/bin",
        # the guard alone: its sitecustomize keeps the agent's files off pytest's module path (GUARD_SOURCE)
        # and appends the lean site last, so an environment's own pytest (uvx's, a venv's) takes precedence
        "PYTHONPATH": f"{TOOLCHAIN_MOUNT}/guard",
        FALLBACK_SITE_VARIABLE: f"{TOOLCHAIN_MOUNT}/site-packages",
        "PYTHONNOUSERSITE": "1",
        "UV_PYTHON": f"{TOOLCHAIN_MOUNT}/bin/python3",  # uv and uvx run the toolchain's interpreter
        "UV_PYTHON_DOWNLOADS": "never",  # no network: fail naming the missing Python, not a timeout
        **UV_ISOLATION,
    }
    _TOOLCHAIN = VerifierToolchain(binds=tuple(binds), symlinks=(), env=env, site=str(site))
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
    verifier's launch (``verifier=True``), the toolchain's ``site-packages`` at its sandbox path.

    The answer is kept per process with every directory whose listing decided it (the folders the site
    globs walk, the sites, the packages) and their ``stat``; a later call only ``stat``s those and searches
    again when one changed (a package installed, removed or given ``pools``), so a launch pays a few
    ``stat`` calls, not the globs. An answer read while one of them had changed in the last `RACY_NS` is not
    kept (a second change within the file system's clock tick would leave its time as it was).
    """
    location = _t1_tasks_location()
    kept = _MASKS.get(verifier)
    if kept is not None and kept[0] == location and _fingerprint(kept[1]) == kept[2]:
        return kept[3]
    watched: set[str] = set()
    found = _search_masks(verifier=verifier, location=location, watched=watched)
    ordered = tuple(sorted(watched))
    stats = _fingerprint(ordered)
    # file times are coarse (a clock tick): a folder changed this recently could change again unseen
    recent = time.time_ns() - RACY_NS
    if all(st is None or st[2] < recent for st in stats):
        _MASKS[verifier] = (location, ordered, stats, found)
    else:
        _MASKS.pop(verifier, None)
    return found


_Stat = tuple[int, int, int] | None
#: verifier launch? -> (t1_tasks location, watched folders, their stat, the masks)
_MASKS: dict[bool, tuple[tuple[str, ...], tuple[str, ...], tuple[_Stat, ...], tuple[str, ...]]] = {}
RACY_NS = 2_000_000_000  # a folder changed less than this long ago (ns) is too recent to trust its time


def _t1_tasks_location() -> tuple[str, ...]:
    spec = importlib.util.find_spec("t1_tasks")
    return tuple(spec.submodule_search_locations or ()) if spec else ()


def _fingerprint(paths: tuple[str, ...]) -> tuple[_Stat, ...]:
    """``(device, inode, mtime in ns)`` of each path, None for one that is gone."""
    out: list[_Stat] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            out.append(None)
            continue
        out.append((st.st_dev, st.st_ino, st.st_mtime_ns))
    return tuple(out)


def _search_masks(*, verifier: bool, location: tuple[str, ...], watched: set[str]) -> tuple[str, ...]:
    """`bundle_masks`'s search; adds to ``watched`` every folder whose listing it read."""
    found: set[str] = set()
    for pattern in _SITE_GLOBS:  # the folders each glob lists: those where a part has a wildcard
        parts = pattern.split("/")
        for depth in range(2, len(parts)):
            if glob.has_magic(parts[depth]):
                watched.update(glob.glob("/".join(parts[:depth])))
    sites = [Path(d) for pattern in _SITE_GLOBS for d in glob.glob(pattern)]
    for entry in location:
        sites.append(Path(entry).resolve().parent)
    for site in sites:
        real = site.resolve()
        if not any(real == Path(b) or Path(b) in real.parents for b in BOUND_SYSTEM_PATHS):
            continue
        watched.add(str(real))
        for package in real.glob("t1_*"):
            if package.is_dir():
                watched.add(str(package))
                if _holds_bundles(package):
                    found.add(str(package))
    if verifier:
        tc = toolchain()
        watched.add(tc.site)
        for package in Path(tc.site).glob("t1_*"):
            if package.is_dir():
                watched.add(str(package))
                if _holds_bundles(package):
                    found.add(f"{TOOLCHAIN_MOUNT}/site-packages/{package.name}")
    return tuple(sorted(found))
