"""The sandbox registry: the recipe's ``sandbox.kind`` -> the class that implements the ``Sandbox`` seam.

Built: ``local`` (bubblewrap, ``sandbox/local/``), ``docker`` (``sandbox/docker/``) and the entries below;
a kind that validates in the spec but has no entry (``harbor``) is refused by `SANDBOXES.load` naming
``sandbox.kind``. Adding a backend is one module and one entry here. The class is imported on first use, so
reading this table imports no backend.
"""

from __future__ import annotations

from t1_spec import Registry

__all__ = ["SANDBOXES"]

SANDBOXES = Registry(
    "sandbox.kind",
    {
        "local": "t1_sandbox.local:LocalSandbox",
        "docker": "t1_sandbox.docker:DockerSandbox",
        "daytona": "t1_sandbox.daytona:DaytonaSandbox",
    },
)
"""``sandbox.kind -> "module:Class"``; each class has ``from_spec(spec, **overrides)`` and ``preflight``."""
