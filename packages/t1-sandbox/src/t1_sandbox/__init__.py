"""Sandboxes: where the agent's shell commands and the verifier run (DESIGN.md "Interfaces between packages").

The seam is ``base.py`` (``Sandbox``, ``Shell``, their errors); beside it live what any backend can reuse,
the Dockerfile parser (``dockerfile.py``), the tar transfer (``transfer.py``), the one terminal every
backend's persistent shell reads through (``terminal.py``: output bound and omitted-bytes line, prompt
marker, completion and keystroke pacing) with the kernel's view of a shell's bash that confirms a prompt
(``bash_view.py``), the creation pacing (``token_bucket.py``), the watchdog that reclaims a
process's local and Docker sandboxes after its ``kill -9`` (``watchdog.py``), and the registry ``SANDBOXES``
(``registry.py``, ``sandbox.kind -> class``). Backends: ``LocalSandbox`` (bubblewrap, this
machine, ``local/``), which builds only a Dockerfile subset (FROM debian:bookworm[-slim], WORKDIR, COPY, ENV,
RUN); ``DockerSandbox`` (``docker/``), which builds the task's Dockerfile as written on a Docker daemon;
``DaytonaSandbox`` (``daytona/``, the Daytona API; the shell is the toolbox's PTY session). Not built yet:
the harbor sandbox.

``LocalSandbox``, ``LocalShell``, ``bwrap_path``, ``local_sandbox_problems`` and ``SANDBOXES`` load on first
use, so importing the seam imports neither the bubblewrap backend nor the spec package.
"""

from typing import TYPE_CHECKING, Any

from t1_sandbox.base import (
    ExecResult,
    Sandbox,
    SandboxError,
    SandboxTimeout,
    Shell,
    ShellDied,
    UnsupportedDockerfileInstruction,
)
from t1_sandbox.dockerfile import parse_dockerfile

if TYPE_CHECKING:
    from t1_sandbox.local import LocalSandbox, LocalShell, bwrap_path, local_sandbox_problems
    from t1_sandbox.registry import SANDBOXES

__all__ = [
    "SANDBOXES",
    "ExecResult",
    "LocalSandbox",
    "LocalShell",
    "Sandbox",
    "SandboxError",
    "SandboxTimeout",
    "Shell",
    "ShellDied",
    "UnsupportedDockerfileInstruction",
    "bwrap_path",
    "local_sandbox_problems",
    "parse_dockerfile",
]

_LOCAL = ("LocalSandbox", "LocalShell", "bwrap_path", "local_sandbox_problems")


def __getattr__(name: str) -> Any:
    if name in _LOCAL:
        from t1_sandbox import local

        return getattr(local, name)
    if name == "SANDBOXES":
        from t1_sandbox.registry import SANDBOXES

        return SANDBOXES
    raise AttributeError(f"module 't1_sandbox' has no attribute {name!r}")
