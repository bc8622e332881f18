"""Sandboxes: where the agent's shell commands and the verifier run (DESIGN.md "Interfaces between packages").

Backends: ``LocalSandbox`` (bubblewrap, this machine), which builds only a Dockerfile subset (FROM
debian:bookworm[-slim], WORKDIR, COPY, ENV, RUN). Not built yet: the docker, daytona and harbor sandboxes.
"""

from t1_rollout.sandbox._host import bwrap_path, local_sandbox_problems
from t1_rollout.sandbox.base import (
    ExecResult,
    Sandbox,
    SandboxError,
    SandboxTimeout,
    Shell,
    ShellDied,
    UnsupportedDockerfileInstruction,
)
from t1_rollout.sandbox.dockerfile import parse_dockerfile
from t1_rollout.sandbox.local import LocalSandbox, LocalShell

__all__ = [
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
