"""A training run: preflight, build from the registries, the loop, the run directory, the console, signals.

`t1 train` is a thin verb over `t1.run.Run`; `t1 recipe validate` shows the same `t1.run.preflight.preflight`
verdict that `Run` enforces, so the two never disagree. Importing this package imports no torch and not the
driver: `Run` loads `t1.run.driver` (the one step loop), and `RunFailed`, `RunSummary` and `planned_steps`
load `t1.run.steps`, on first access; the heavy parts (torch, transformers) load in `t1.run.build` when a
run starts.
"""

import importlib
from typing import TYPE_CHECKING, Any

# Eager, so that ``t1.run.preflight`` is the function (its submodule of the same name is imported here first).
from t1.run.preflight import Preflight, PreflightError, preflight
from t1.run.signals import StopToken, stop_signals

if TYPE_CHECKING:
    from t1.run.driver import Run
    from t1.run.steps import RunFailed, RunSummary, planned_steps

__all__ = [
    "Preflight",
    "PreflightError",
    "Run",
    "RunFailed",
    "RunSummary",
    "StopToken",
    "planned_steps",
    "preflight",
    "stop_signals",
]

_LAZY = {
    "Run": "t1.run.driver",
    "RunFailed": "t1.run.steps",
    "RunSummary": "t1.run.steps",
    "planned_steps": "t1.run.steps",
}
"""Names imported on first access, and their modules."""


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 't1.run' has no attribute {name!r}")
