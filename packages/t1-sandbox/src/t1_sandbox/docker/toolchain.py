"""The Docker sandbox's verifier toolchain: this host's Python with pytest, uv and the in-container launcher.

One read-only Docker volume per toolchain (``t1-verifier-<hash>``, labelled ``t1.toolchain``) holds, under
``/opt/t1/verifier`` (mode 0750, owner root, group `VERIFIER_GID`): the host interpreter (``sys.base_prefix``:
its binary with its run path made relative, ``libpython``, the standard library with its bytecode, less
``test``, ``idlelib``, ``tkinter`` and the static library), `DISTRIBUTIONS` (pytest, pytest-json-ctrf and what
they need, with their metadata so that pytest finds the plugin), ``uv`` and ``uvx`` (the ``uv`` PyPI package's
binaries), a ``pytest`` command (``python3 -s -P -m pytest``, unless the task's environment has a ``pytest``
of its own that only root can change, with its Python: ``_PYTEST_COMMAND``, ``handover.py``), the import guard
(``guard/sitecustomize.py``, alone on the verifier's ``PYTHONPATH``: pytest never imports from the working
directory ahead of the toolchain; it appends the toolchain's ``site-packages`` last, for a process with no
pytest of its own, so uvx's or a venv's pinned pytest and plugins take precedence) and ``t1run.py`` (the
launcher, run isolated: `LAUNCH`). The volume is mounted in every container, but only the verifier's launch
runs with group `VERIFIER_GID`: the agent's uid cannot enter the directory, and nothing in the container can
write the volume. The tree is built on the host once (cached under ``/var/tmp/t1-docker-toolchain``) and
copied into the volume once per daemon.

Other CPythons of this host, for the ``uvx -p X.Y`` of Terminal-Bench 2 scripts (`EXTRA_PYTHONS`), are
added the same way under ``pythons/X.Y`` with a ``pythonX.Y`` link in ``bin``, when this host has them
(``uv python find``): a verifier that asks for one then finds it offline whatever the image holds.

Limit: the interpreter is the host's build, so the task image's C library must be at least as new as the
host's (glibc 2.36 on Debian bookworm: bookworm, trixie and Ubuntu 24.04 images qualify; bullseye does not).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import io
import os
import py_compile
import subprocess
import sys
import tarfile
import threading
from pathlib import Path
from typing import Any

from t1_sandbox.base import SandboxError
from t1_sandbox.local.toolchain import FALLBACK_SITE_VARIABLE, UV_ISOLATION
from t1_sandbox.verifier_env import ROOTS, distributions

__all__ = [
    "DISTRIBUTIONS",
    "GUARD",
    "LAUNCH",
    "LAUNCHER",
    "MOUNT",
    "NOT_INHERITED",
    "PYTHON",
    "ROOT",
    "VERIFIER_GID",
    "ensure_volume",
    "toolchain_tar",
    "verifier_env",
]

MOUNT = "/opt/t1"
ROOT = f"{MOUNT}/verifier"
PYTHON = f"{ROOT}/bin/python3"
LAUNCHER = f"{ROOT}/t1run.py"
#: How T1 starts the launcher as the container's root: isolated (``-I``: no ``PYTHON*`` variable, no user site
#: under an agent's ``HOME``, no script folder on the module path), so nothing the agent wrote runs as root.
LAUNCH = (PYTHON, "-I", LAUNCHER)
#: The folder alone on the verifier's ``PYTHONPATH``, holding the import guard (``sitecustomize.py``).
GUARD = f"{ROOT}/guard"
_GUARD_SOURCE = Path(__file__).resolve().parents[1] / "verifier_site" / "sitecustomize.py"
VERIFIER_GID = 1999
#: The distributions whose closure (what they require on this interpreter: ``verifier_env.distributions``)
#: is copied into the toolchain's site-packages, the same lean set as the local verifier's.
DISTRIBUTIONS = ROOTS
_SKIP_STDLIB = ("site-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3")
_CACHE = Path("/var/tmp/t1-docker-toolchain")
#: CPython versions added beside this host's own when this host has them: the one Terminal-Bench 2's
#: ``uvx -p 3.13`` asks for.
EXTRA_PYTHONS = ("3.13",)
_LOCK = threading.Lock()


#: Variables of the image (kept by the sealed box from its ``ENV``) that no root process of T1 inherits:
#: a shell's start-up file (``BASH_ENV``, ``ENV`` for sh), sourced by every shell as root, and
#: ``LD_LIBRARY_PATH``, searched ahead of the toolchain's run path by every program: one naming a file or
#: folder the agent can write (an empty entry is the working directory, the agent's task root) ran its code
#: as root before any test. Empty is unset for bash, sh and the dynamic loader.
NOT_INHERITED = {"BASH_ENV": "", "ENV": "", "LD_LIBRARY_PATH": ""}


def verifier_env(image_path: str) -> dict[str, str]:
    """Variables putting the toolchain first on PATH for the verifier's launch (``image_path``: image's)."""
    return {
        "PATH": f"{ROOT}/bin:{image_path}",
        # the guard alone: it appends the lean site last, so the environment's own pytest takes precedence
        "PYTHONPATH": GUARD,
        FALLBACK_SITE_VARIABLE: f"{ROOT}/site-packages",
        "PYTHONNOUSERSITE": "1",
        **UV_ISOLATION,  # an image's uv, or one test.sh installs, reads nothing the agent wrote
        **NOT_INHERITED,
    }


def _relative_runpath(binary: bytes, prefix: str) -> bytes:
    """The interpreter binary with its RUNPATH ``<prefix>/lib`` rewritten in place as ``$ORIGIN/../lib``."""
    old = f"{prefix}/lib".encode() + b"\0"
    new = b"$ORIGIN/../lib\0"
    if binary.count(old) != 1 or len(new) > len(old):
        return binary  # no absolute run path to fix (a relocatable build): leave it as built
    return binary.replace(old, new.ljust(len(old), b"\0"))


def _python_candidates(version: str) -> list[Path]:
    """Where this host may have CPython ``version``: uv's answer, ``PATH``, uv's and pyenv's folders."""
    found: list[Path] = []
    try:
        from uv import find_uv_bin

        done = subprocess.run(
            [find_uv_bin(), "python", "find", "--system", "--no-project", version],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"},
        )
        if done.returncode == 0 and done.stdout.strip():
            found.append(Path(done.stdout.strip()))
    except (ImportError, OSError, subprocess.TimeoutExpired):
        pass
    found += [Path(d) / f"python{version}" for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    homes = [
        Path.home() / ".local/share/uv/python",
        Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")),
    ]
    for home in homes:
        found += sorted(home.glob(f"cpython-{version}.*/bin/python{version}"))
        found += sorted((home / "versions").glob(f"{version}.*/bin/python{version}"))
    return found


_ASK_PREFIX = "import sys; print(sys.base_prefix); print(sys.implementation.name)"


@functools.cache
def extra_pythons() -> tuple[tuple[str, Path], ...]:
    """``(X.Y, prefix)`` of each `EXTRA_PYTHONS` version this host has as a CPython with a ``lib/pythonX.Y``.

    Each candidate (`_python_candidates`) is asked for its own ``sys.base_prefix`` (a shim that cannot run
    is skipped); nothing is downloaded, and this host's own version is not repeated.
    """
    own = f"{sys.version_info.major}.{sys.version_info.minor}"
    found = []
    for version in EXTRA_PYTHONS:
        if version == own:
            continue
        for exe in _python_candidates(version):
            if not exe.is_file():
                continue
            try:
                done = subprocess.run(
                    [
                        str(exe),
                        "-I",
                        "-c",
                        "import sys; print(sys.base_prefix); print(sys.implementation.name)",
                    ],
                    capture_output=True,
                    text=True,
                    timeout=30,
                )
            except (OSError, subprocess.TimeoutExpired):
                continue
            lines = done.stdout.split()
            if done.returncode != 0 or lines[-1:] != ["cpython"]:
                continue
            prefix = Path(lines[0])
            if (prefix / "lib" / f"python{version}" / "os.py").is_file() and (
                prefix / "bin" / f"python{version}"
            ).is_file():
                found.append((version, prefix))
                break
    return tuple(found)


def _key() -> str:
    parts = [sys.base_prefix, sys.version, Path(__file__).with_name("t1run.py").read_text()]
    parts += [f"{version}={prefix}" for version, prefix in extra_pythons()]
    parts += [_GUARD_SOURCE.read_text(), _PYTEST_COMMAND, _HANDOVER_SOURCE.read_text()]
    for dist in distributions(DISTRIBUTIONS):
        parts.append(f"{dist.metadata['Name']}=={dist.version}")
    parts.append("layout-2")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _add(tar: tarfile.TarFile, src: Path, arc: str, *, mode: int | None = None) -> None:
    info = tar.gettarinfo(str(src), arcname=arc)
    info.uid, info.gid, info.uname, info.gname = 0, VERIFIER_GID, "", ""
    if mode is not None:
        info.mode = mode
    if info.isreg():
        with open(src, "rb") as fh:
            tar.addfile(info, fh)
    else:
        tar.addfile(info)


def _add_bytes(tar: tarfile.TarFile, data: bytes, arc: str, mode: int) -> None:
    info = tarfile.TarInfo(arc)
    info.size, info.mode, info.uid, info.gid = len(data), mode, 0, VERIFIER_GID
    tar.addfile(info, io.BytesIO(data))


def _add_tree(tar: tarfile.TarFile, src: Path, arc: str, skip: tuple[str, ...] = ()) -> None:
    _add(tar, src, arc, mode=0o755)
    for entry in sorted(src.iterdir()):
        if entry.name in skip or entry.name.startswith("config-"):
            continue
        if entry.is_dir() and not entry.is_symlink():
            _add_tree(tar, entry, f"{arc}/{entry.name}")
        else:
            _add(tar, entry, f"{arc}/{entry.name}")


def _dir(tar: tarfile.TarFile, arc: str, mode: int = 0o755) -> None:
    info = tarfile.TarInfo(arc)
    info.type, info.mode, info.uid, info.gid = tarfile.DIRTYPE, mode, 0, VERIFIER_GID
    tar.addfile(info)


def _add_python(tar: tarfile.TarFile, version: str, prefix: Path) -> None:
    """One more CPython under ``verifier/pythons/<version>``, linked as ``verifier/bin/python<version>``."""
    root = f"verifier/pythons/{version}"
    _dir(tar, root)
    _dir(tar, f"{root}/bin")
    exe = prefix / "bin" / f"python{version}"
    _add_bytes(tar, _relative_runpath(exe.read_bytes(), str(prefix)), f"{root}/bin/python{version}", 0o755)
    _dir(tar, f"{root}/lib")
    for lib in sorted((prefix / "lib").glob("libpython*.so*")):
        _add(tar, lib, f"{root}/lib/{lib.name}")
    _add_tree(tar, prefix / "lib" / f"python{version}", f"{root}/lib/python{version}", skip=_SKIP_STDLIB)
    link = tarfile.TarInfo(f"verifier/bin/python{version}")
    link.type, link.mode, link.gid = tarfile.SYMTYPE, 0o777, VERIFIER_GID
    link.linkname = f"../pythons/{version}/bin/python{version}"
    tar.addfile(link)


#: The toolchain's ``pytest`` command. A ``pytest`` that the task's environment has further along ``PATH``
#: (what ``test.sh``'s ``pip install pytest`` put into the image's Python, as Harbor runs it) runs instead,
#: when only root can change it, its Python and every folder that Python reads at start (`HANDOVER`, run
#: by the toolchain's Python: a root-owned script alone let a ``.pth`` in a site folder the image gave the
#: agent run as root). Else the toolchain's, with ``-s -P``: neither the working directory nor the user
#: site is on the module path.
HANDOVER = f"{ROOT}/handover.py"
_HANDOVER_SOURCE = Path(__file__).with_name("handover.py")
_PYTEST_COMMAND = (
    "#!/bin/sh\n"
    'self=$(cd -P -- "$(dirname -- "$0")" && pwd); IFS=:\n'
    'for d in $PATH; do case "$d" in /*) ;; *) continue ;; esac\n'
    '  p=$(cd -P -- "$d" 2>/dev/null && pwd) && [ "$p" != "$self" ] && [ -f "$p/pytest" ] && '
    f'[ -x "$p/pytest" ] && [ ! -L "$p/pytest" ] && {PYTHON} -I -S {HANDOVER} "$p/pytest" && '
    '{ unset IFS; exec "$p/pytest" "$@"; }\n'
    "done\nunset IFS\n"
    f'exec {PYTHON} -s -P -m pytest "$@"\n'
)


def _write_tar(path: Path) -> None:
    base = Path(sys.base_prefix)
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    exe = base / "bin" / ver
    if not exe.is_file():
        raise SandboxError(f"docker verifier toolchain: interpreter {exe} not found")
    try:
        from uv import find_uv_bin
    except ImportError as exc:
        raise SandboxError("docker verifier toolchain: the uv package is not installed") from exc
    uv = Path(find_uv_bin())
    with tarfile.open(path, "w") as tar:
        _dir(tar, "verifier", 0o750)
        _dir(tar, "verifier/bin")
        _add_bytes(tar, _relative_runpath(exe.read_bytes(), str(base)), f"verifier/bin/{ver}", 0o755)
        for alias in ("python3", "python"):
            link = tarfile.TarInfo(f"verifier/bin/{alias}")
            link.type, link.linkname, link.mode, link.gid = tarfile.SYMTYPE, ver, 0o777, VERIFIER_GID
            tar.addfile(link)
        for tool in ("uv", "uvx"):
            if (uv.parent / tool).is_file():
                _add(tar, uv.parent / tool, f"verifier/bin/{tool}", mode=0o755)
        _add_bytes(tar, _PYTEST_COMMAND.encode(), "verifier/bin/pytest", 0o755)
        _add(tar, _HANDOVER_SOURCE, "verifier/handover.py", mode=0o644)
        _dir(tar, "verifier/guard")
        _add(tar, _GUARD_SOURCE, "verifier/guard/sitecustomize.py", mode=0o644)
        _dir(tar, "verifier/guard/__pycache__")  # compiled here: the volume is read-only in the container
        pyc = path.with_suffix(".pyc.tmp")
        try:
            py_compile.compile(str(_GUARD_SOURCE), cfile=str(pyc), dfile=f"{GUARD}/sitecustomize.py")
            cached = Path(importlib.util.cache_from_source("sitecustomize.py")).name
            _add(tar, pyc, f"verifier/guard/__pycache__/{cached}", mode=0o644)
        finally:
            pyc.unlink(missing_ok=True)
        _dir(tar, "verifier/lib")
        for lib in sorted((base / "lib").glob("libpython*.so*")):
            _add(tar, lib, f"verifier/lib/{lib.name}")
        _add_tree(tar, base / "lib" / ver, f"verifier/lib/{ver}", skip=_SKIP_STDLIB)
        _dir(tar, "verifier/site-packages")
        made: set[str] = set()
        for dist in distributions(DISTRIBUTIONS):
            for file in dist.files or ():
                src = Path(str(dist.locate_file(file)))
                if file.parts[0] in ("..", "/") or not src.is_file():
                    continue  # console scripts outside site-packages, missing RECORD entries
                parents = file.parts[:-1]
                for i in range(1, len(parents) + 1):
                    arc = "verifier/site-packages/" + "/".join(parents[:i])
                    if arc not in made:
                        made.add(arc)
                        _dir(tar, arc)
                _add(tar, src, f"verifier/site-packages/{file.as_posix()}")
        _dir(tar, "verifier/pythons")
        for version, prefix in extra_pythons():
            _add_python(tar, version, prefix)
        _add(tar, Path(__file__).with_name("t1run.py"), "verifier/t1run.py", mode=0o644)
        _add_bytes(tar, b"", ".complete", 0o644)  # last: its presence means the whole tree was copied


@functools.cache
def toolchain_tar() -> tuple[str, Path]:
    """``(key, path)`` of the toolchain archive for this interpreter, built once and cached on disk."""
    key = _key()
    path = _CACHE / f"{key}.tar"
    with _LOCK:
        if not path.is_file():
            _CACHE.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            try:
                _write_tar(tmp)
                os.replace(tmp, path)
            finally:
                if tmp.exists():
                    tmp.unlink()
    return key, path


_READY: set[tuple[str | None, str]] = set()


def ensure_volume(api: Any, host: str | None, image: str) -> str:
    """The name of the daemon's toolchain volume, created and filled first when missing or incomplete.

    Filling copies the archive through a created (never started) container of ``image`` that mounts the
    volume; the marker file ``.complete`` comes last in the archive, so a volume that has it is whole.

    Raises:
        SandboxError: the volume could not be created or filled.
    """
    import docker

    key, tar_path = toolchain_tar()
    name = f"t1-verifier-{key}"
    if (host, name) in _READY:
        return name
    with _LOCK:
        if (host, name) in _READY:
            return name
        try:
            api.create_volume(name, labels={"t1.toolchain": key})
            helper = api.create_container(
                image,
                command=["true"],
                host_config=api.create_host_config(binds={name: {"bind": MOUNT, "mode": "rw"}}),
                labels={"t1.toolchain": key},
                network_disabled=True,
            )["Id"]
            try:
                try:
                    api.get_archive(helper, f"{MOUNT}/.complete")
                except docker.errors.NotFound:
                    with open(tar_path, "rb") as fh:
                        api.put_archive(helper, MOUNT, fh)
            finally:
                api.remove_container(helper, force=True)
        except docker.errors.APIError as exc:
            raise SandboxError(f"docker verifier toolchain volume {name}: {exc}") from exc
        _READY.add((host, name))
    return name
