"""The verifier's wheelhouse on the host: the packages a task's ``test.sh`` installs, fetched once.

``t1_rollout.verifier_toolchain`` uploads the folder to the verifier read-only and points uv and pip at it,
so an unmodified Terminal-Bench 2 ``uvx -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5`` runs offline.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from t1_sandbox.base import SandboxError

__all__ = ["HOST_CACHE", "fill_wheelhouse"]

#: Host cache of wheelhouses, one folder per (Python, requirements).
HOST_CACHE = Path(os.environ.get("T1_WHEELHOUSE_CACHE", "/var/tmp/t1-wheelhouse"))
_FILL_TIMEOUT_S = 300.0
_LOCK = threading.Lock()
_MISSED: dict[Path, list[str]] = {}  # this process's fills that lacked something: not retried here
_PLATFORMS = {"x86_64": "x86_64", "AMD64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def _pip_command() -> list[str]:
    """A pip that can download: this interpreter's, else uv's tool runner with pip."""
    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip"]
    try:
        from uv import find_uv_bin

        uv: str | None = find_uv_bin()
    except (ImportError, FileNotFoundError):
        uv = shutil.which("uv")
    if uv is None:
        raise SandboxError("verifier wheelhouse: neither pip nor uv is installed on this host")
    return [uv, "tool", "run", "--from", "pip", "pip"]


def fill_wheelhouse(requirements: list[str], python: str) -> tuple[Path, list[str]]:
    """The host folder of wheels for ``requirements`` on CPython ``python``, downloaded once and cached.

    Downloads binary wheels only (``--only-binary=:all:``, Linux on this host's architecture, or pure
    Python), dependencies included, from the package index pip is configured for. Each requirement is
    fetched on its own, so one the index cannot give does not keep the others out. A complete fill is kept
    on disk for every later process; one that lacked something is served as it is and tried again by the
    next process only (the index may come back).

    Args:
        requirements: ``name`` or ``name==version`` strings.
        python: ``X.Y``, the interpreter the wheels are for.

    Returns:
        ``(folder, problems)``: the folder (possibly empty) and one line per requirement not fetched.

    Raises:
        SandboxError: no pip can be run on this host.
    """
    key = hashlib.sha256("\n".join([python, *sorted(requirements)]).encode()).hexdigest()[:16]
    folder = HOST_CACHE / f"cp{python.replace('.', '')}-{key}"
    done = folder / ".complete"
    with _LOCK:
        if done.is_file():
            return folder, []
        if folder in _MISSED:
            return folder.with_suffix(".partial"), _MISSED[folder]
        arch = _PLATFORMS.get(platform.machine(), platform.machine())
        tmp = Path(tempfile.mkdtemp(prefix=f"{folder.name}.", dir=_cache_dir()))
        problems = []
        base = [*_pip_command(), "download", "--quiet", "--disable-pip-version-check", "--only-binary=:all:"]
        base += ["--python-version", python, "--implementation", "cp", "-d", str(tmp)]
        for tag in (f"manylinux2014_{arch}", f"manylinux_2_28_{arch}", f"linux_{arch}", "any"):
            base += ["--platform", tag]
        for requirement in requirements:
            try:
                done_run = subprocess.run(
                    [*base, requirement], capture_output=True, text=True, timeout=_FILL_TIMEOUT_S
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                problems.append(f"{requirement}: {type(exc).__name__}: {exc}")
                continue
            if done_run.returncode != 0:
                last = (done_run.stderr.strip().splitlines() or ["no output"])[-1]
                why = f"the package index gave no wheel for CPython {python} ({last})"
                problems.append(f"{requirement}: {why}")
        if problems:  # what came is served; the next process tries again (the index may be back)
            partial = folder.with_suffix(".partial")
            shutil.rmtree(partial, ignore_errors=True)
            os.replace(tmp, partial)
            _MISSED[folder] = problems
            return partial, problems
        (tmp / ".complete").write_text("")
        try:
            os.replace(tmp, folder)
        except OSError:  # another process filled it first
            shutil.rmtree(tmp, ignore_errors=True)
        return folder, []


def _cache_dir() -> Path:
    HOST_CACHE.mkdir(parents=True, exist_ok=True)
    return HOST_CACHE
