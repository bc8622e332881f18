"""A training run: preflight, build from the registries, the loop, the run directory, the console, signals.

`t1 train` is a thin verb over `t1.run.Run`; `t1 recipe validate` shows the same `t1.run.preflight.preflight`
verdict that `Run` enforces, so the two never disagree. Importing this package imports no torch: the heavy
parts load in `t1.run.build` when a run starts.
"""

from t1.run.loop import Run, RunFailed, RunSummary, planned_steps
from t1.run.preflight import Preflight, PreflightError, preflight
from t1.run.signals import StopToken, stop_signals

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
