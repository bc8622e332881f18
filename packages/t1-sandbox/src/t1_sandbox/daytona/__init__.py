"""The Daytona sandbox backend (``sandbox.kind: daytona``, the paper's provider, T1 §6, §7).

``sandbox.py`` holds `DaytonaSandbox` (the seam on the ``daytona`` SDK) and `reclaim_run` (orphans of a dead
run, by label); ``config.py`` what a sandbox is created with (resources, image, intervals, labels,
credentials) and the preflight lines; ``command.py`` the exec wrapper (separate streams, group kill at the
deadline); ``pacing.py`` the creation pacing under the provider quota; ``retry.py`` when a refused create
(HTTP 429, 5xx) is tried again; ``shell.py`` the agent's persistent bash on a toolbox PTY session. The SDK
is imported only when a sandbox is made or reclaimed, never at import.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from t1_sandbox.daytona.sandbox import DaytonaSandbox, default_run_id, reclaim_run

__all__ = ["DaytonaSandbox", "default_run_id", "reclaim_run"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from t1_sandbox.daytona import sandbox

        return getattr(sandbox, name)
    raise AttributeError(f"module 't1_sandbox.daytona' has no attribute {name!r}")
