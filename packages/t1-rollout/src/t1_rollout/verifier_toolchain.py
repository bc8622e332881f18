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
   script asks for (``-p 3.13``, else the toolchain's; ``t1_sandbox.wheelhouse``), and uploaded read-only to
   `WHEELS_DIR` after the agent is gone; uv is pointed at it (``UV_FIND_LINKS``), and without network
   (``sandbox.network`` false) told to stay offline (``UV_OFFLINE=1``, ``UV_PYTHON_DOWNLOADS=never``). A
   script that installs with a bare ``pip`` and names no Python gets wheels for the Python of the ``pip``
   first on the verifier's ``PATH`` too (the image's: ``python:3.13`` bases have their own), as that pip is
   the one that installs;
3. **a CPython for** ``uvx -p X.Y``: what the image has (``python3.13`` on its ``PATH``) or the toolchain's
   own interpreter; T1 downloads none. When neither is ``X.Y``, the verifier does not run and the trial is
   an infrastructure failure (``t1_reward.no_run``); a line starting with `MARK`, printed before
   ``test.sh`` only then, says that no ``pythonX.Y`` was on the verifier's ``PATH`` and which ``python3``
   was, so the cause says so.

What was provided is one line, `Provision.describe`, kept in the verifier run's record.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from t1_sandbox.base import Sandbox, SandboxError
from t1_sandbox.local.toolchain import VERIFIER_UV_DIR
from t1_sandbox.wheelhouse import fill_wheelhouse
from t1_tasks.verifier_needs import VerifierNeeds, read_verifier_needs

__all__ = ["HOME_DIR", "MARK", "WHEELS_DIR", "Provision", "provision"]

#: The verifier's ``HOME`` inside the sandbox (made fresh by the verifier's launch before ``test.sh``).
HOME_DIR = "/tmp/.t1-verifier-home"
#: Where the wheelhouse is uploaded, read-only and owned by root (its parent ``/`` is root's).
WHEELS_DIR = "/t1-verifier-wheels"
#: The line the launch prints before ``test.sh``: the Pythons there were, for a cause that names them.
MARK = "[t1-verifier-toolchain]"


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


async def _pip_python(sandbox: Sandbox) -> str | None:
    """``X.Y`` of the ``pip`` first on the verifier's ``PATH`` in ``sandbox`` (``pip --version``), or None."""
    try:
        said = await sandbox.exec("pip --version 2>/dev/null", env=sandbox.verifier_env(), timeout_s=60)
    except SandboxError:
        return None
    found = re.search(r"\(python (\d+\.\d+)\)", said.stdout)
    return found.group(1) if found else None


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
    problems: list[str] = []
    requirements = _requirements(needs)
    pythons = [python]
    if requirements and needs.python is None and not needs.uses_uv:
        pip_python = await _pip_python(sandbox)  # a bare pip installs for its own Python, not ours
        if pip_python is not None and pip_python != python:
            pythons.append(pip_python)
    found: dict[str, Path] = {}
    for version in pythons if requirements else []:
        try:
            folder, missed = await asyncio.to_thread(fill_wheelhouse, requirements, version)
        except SandboxError as exc:
            folder, missed = None, [str(exc)]
        problems += [f"{line} (python {version})" if version != python else line for line in missed]
        found |= {p.name: p for p in folder.glob("*.whl")} if folder is not None else {}
    names = tuple(sorted(found))
    if names:
        with tempfile.TemporaryDirectory(prefix="t1-wheels-") as tmp:
            staged = Path(tmp) / "wheels"
            staged.mkdir()
            for name in names:
                shutil.copy2(found[name], staged / name)
            await sandbox.upload(staged, WHEELS_DIR, timeout_s=120, read_only=True)
    prelude = _prelude(wheels=bool(names), offline=offline, python=needs.python)
    return Provision(prelude, names, needs.python, offline, tuple(problems))
