"""What T1 provides to a task's verifier so that an unmodified Terminal-Bench 2 ``test.sh`` runs offline.

Terminal-Bench 2's scripts install ``curl`` with apt, install uv from astral.sh into ``$HOME/.local/bin``,
``source $HOME/.local/bin/env``, then run ``uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5
pytest ...`` (harbor_tb.md §1.3). Without network every step before pytest fails. `provision` gives the
verifier, on every backend (it uses only the ``Sandbox`` seam):

1. **a home of its own**: ``HOME`` is `HOME_DIR`, made fresh before ``test.sh``, whose ``.local/bin`` holds
   ``uv`` and ``uvx`` (links to the verifier toolchain's, first on the verifier's ``PATH``) and an ``env``
   file that puts that folder first on ``PATH``, as uv's installer writes it. The agent's ``HOME`` (a file
   there that the script would source) no longer steers the verifier;
2. **a wheelhouse**: the packages the script installs for its tests (``t1_tasks.verifier_needs``: ``-w
   pytest==8.4.1``, ``pip install X``), fetched once on the host from the package index for the Python the
   script asks for (``-p 3.13``, else the toolchain's), cached under `HOST_CACHE`, and uploaded read-only to
   `WHEELS_DIR` after the agent is gone; uv is pointed at it (``UV_FIND_LINKS``), and without network
   (``sandbox.network`` false) told to stay offline (``UV_OFFLINE=1``, ``UV_PYTHON_DOWNLOADS=never``);
3. **a CPython for** ``uvx -p X.Y``: what the image has (``python3.13`` on its ``PATH``) or the toolchain's
   own interpreter; T1 downloads none. When neither is ``X.Y``, the verifier does not run and the trial is
   an infrastructure failure (``t1_reward.no_run``); a line starting with `MARK`, printed before
   ``test.sh`` only then, says that no ``pythonX.Y`` was on the verifier's ``PATH`` and which ``python3``
   was, so the cause says so.

What was provided is one line, `Provision.describe`, kept in the verifier run's record.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from t1_sandbox.base import Sandbox, SandboxError
from t1_sandbox.local.toolchain import VERIFIER_UV_DIR
from t1_tasks.verifier_needs import VerifierNeeds, read_verifier_needs

__all__ = ["HOME_DIR", "HOST_CACHE", "MARK", "WHEELS_DIR", "Provision", "fill_wheelhouse", "provision"]

#: The verifier's ``HOME`` inside the sandbox (made fresh by the verifier's launch before ``test.sh``).
HOME_DIR = "/tmp/.t1-verifier-home"
#: Where the wheelhouse is uploaded, read-only and owned by root (its parent ``/`` is root's).
WHEELS_DIR = "/t1-verifier-wheels"
#: Host cache of wheelhouses, one folder per (Python, requirements).
HOST_CACHE = Path(os.environ.get("T1_WHEELHOUSE_CACHE", "/var/tmp/t1-wheelhouse"))
#: The line the launch prints before ``test.sh``: the Pythons there were, for a cause that names them.
MARK = "[t1-verifier-toolchain]"
_FILL_TIMEOUT_S = 300.0
_LOCK = threading.Lock()
_MISSED: dict[Path, list[str]] = {}  # this process's fills that lacked something: not retried here
_PLATFORMS = {"x86_64": "x86_64", "AMD64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


@dataclass(frozen=True)
class Provision:
    """What `provision` gave one verifier run.

    Attributes:
        prelude: the shell line run before ``test.sh`` in the verifier's launch (exports ``HOME`` and uv's
            settings, makes the home, prints `MARK`'s line); ends with ``;``.
        wheels: the wheel files uploaded to `WHEELS_DIR` (names), empty when none.
        python: the ``X.Y`` the script asks for, or None.
        offline: uv was told to stay offline (the sandbox has no network).
        problems: what T1 could not provide (a requirement the package index did not give), one line each.
    """

    prelude: str
    wheels: tuple[str, ...] = ()
    python: str | None = None
    offline: bool = False
    problems: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        """One line for the trial's record: uv, the wheels, the Python asked for, offline or not."""
        wheels = f"{len(self.wheels)} wheels in {WHEELS_DIR}" if self.wheels else "no wheelhouse"
        python = f"; python {self.python} from the image or the toolchain" if self.python else ""
        mode = "offline" if self.offline else "online"
        problems = f"; not provided: {'; '.join(self.problems)}" if self.problems else ""
        return f"uv and uvx in {HOME_DIR}/.local/bin, {wheels} ({mode}){python}{problems}"


def _requirements(needs: VerifierNeeds) -> list[str]:
    return [f"{name}=={version}" if version else name for name, version in needs.packages]


def _pip_command() -> list[str]:
    """A pip that can download: this interpreter's, else uv's tool runner with pip."""
    try:
        import pip  # noqa: F401

        return [sys.executable, "-m", "pip"]
    except ImportError:
        uv = shutil.which("uv")
        try:
            from uv import find_uv_bin

            uv = find_uv_bin()
        except ImportError:
            pass
        if uv is None:
            raise SandboxError("verifier wheelhouse: neither pip nor uv is installed on this host") from None
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


def _prelude(*, wheels: bool, offline: bool, python: str | None) -> str:
    home, bin_dir = HOME_DIR, f"{HOME_DIR}/.local/bin"
    settings = [f"HOME={home}", f"XDG_CACHE_HOME={VERIFIER_UV_DIR}/cache"]
    if wheels:
        settings.append(f"UV_FIND_LINKS={WHEELS_DIR}")
    if offline:
        settings += ["UV_OFFLINE=1", "UV_PYTHON_DOWNLOADS=never", "PIP_NO_INDEX=1"]
        if wheels:
            settings.append(f"PIP_FIND_LINKS={WHEELS_DIR}")
    env_file = f'export PATH="{bin_dir}:$PATH"'
    said = ""
    if python:  # named only when missing: the cause of a verifier that did not run then says which there were
        said = (
            f"command -v python{python} >/dev/null 2>&1 || echo \"{MARK} no python{python} on the verifier's "
            f'PATH; python3 is $(python3 -c "import sys; print(sys.version.split()[0])" 2>/dev/null || '
            f'echo missing)"; '
        )
    return (
        f"rm -rf {home} && mkdir -p {bin_dir} && "
        f'for t in uv uvx; do p=$(command -v "$t") && ln -s "$p" {bin_dir}/$t; done; '
        f"printf '%s\\n' '{env_file}' > {bin_dir}/env; export {' '.join(settings)}; {said}"
    )


async def provision(sandbox: Sandbox, tests_dir: Path, *, network: bool | None) -> Provision:
    """Make the task's verifier runnable offline in ``sandbox`` (the module docstring); call after the agent.

    Fetches (once per host) and uploads the wheelhouse of what ``tests_dir / "test.sh"`` installs, read-only
    to `WHEELS_DIR`; returns the prelude that the verifier's launch runs before ``test.sh``.

    Args:
        sandbox: the sandbox, its agent phase ended.
        tests_dir: the task's held-out ``tests/`` on the host.
        network: the sandbox's network policy (``False``: uv is told to stay offline).

    Raises:
        SandboxError: the upload failed (the sandbox is lost, or its root folder is writable by others).
    """
    needs = read_verifier_needs(tests_dir)
    python = needs.python or f"{sys.version_info.major}.{sys.version_info.minor}"
    offline = network is False
    names: tuple[str, ...] = ()
    problems: list[str] = []
    requirements = _requirements(needs)
    if requirements:
        try:
            folder, problems = await asyncio.to_thread(fill_wheelhouse, requirements, python)
        except SandboxError as exc:
            folder, problems = None, [str(exc)]
        if folder is not None:
            names = tuple(sorted(p.name for p in folder.glob("*.whl")))
        if names:
            assert folder is not None
            with tempfile.TemporaryDirectory(prefix="t1-wheels-") as tmp:
                staged = Path(tmp) / "wheels"
                staged.mkdir()
                for name in names:
                    shutil.copy2(folder / name, staged / name)
                await sandbox.upload(staged, WHEELS_DIR, timeout_s=120, read_only=True)
    prelude = _prelude(wheels=bool(names), offline=offline, python=needs.python)
    return Provision(prelude, names, needs.python, offline, tuple(problems))
