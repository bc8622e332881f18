"""The sandbox registry: the recipe's ``sandbox.kind`` -> the class that implements the ``Sandbox`` seam.

Only ``local`` (bubblewrap, ``sandbox/local/``) is built; ``docker``, ``daytona`` and ``harbor`` validate in
the spec but have no entry, so `SANDBOXES.load` refuses them naming ``sandbox.kind``. Adding a backend is one
module and one entry here. The class is imported on first use, so reading this table imports no backend.
"""

from __future__ import annotations

from t1_spec import Registry

__all__ = ["SANDBOXES"]

SANDBOXES = Registry("sandbox.kind", {"local": "t1_rollout.sandbox.local:LocalSandbox"})
"""``sandbox.kind -> "module:Class"``; each class has ``from_spec(spec, **overrides)`` and ``preflight``."""
