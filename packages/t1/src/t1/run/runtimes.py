"""The loop implementations, by ``runtime.kind``: the one-process loop and the Ray loop (T1 §7).

`RUNTIMES` maps the recipe's ``runtime.kind`` to the class that runs it, as the other seams' registries do.
Each has ``from_spec(recipe, resolved, **context)`` (context: ``console``, ``stop``, ``resume_from``),
returning an object with ``run()`` and ``run_dir``, and ``preflight(recipe)``: one line per setting of the
``runtime`` section it cannot run here.
"""

from __future__ import annotations

from typing import Any

from t1_spec import Recipe, Registry

RUNTIMES = Registry(
    "runtime.kind",
    {
        "embedded": "t1.run.runtimes:EmbeddedRuntime",
        "ray": "t1.run.ray.loop:RayRun",
    },
)
"""``runtime.kind`` -> the loop class (``from_spec(recipe, resolved, **context)``, ``preflight``)."""


class EmbeddedRuntime:
    """``runtime.kind: embedded``: the one-process loop `t1.run.loop.Run` (rollout, train, publish)."""

    @classmethod
    def from_spec(cls, recipe: Recipe, resolved: dict[str, Any], **context: Any) -> Any:
        """The embedded `t1.run.loop.Run` (``context``: ``console``, ``stop``, ``resume_from``)."""
        from t1.run.loop import Run

        return Run(recipe, resolved, **context)

    @classmethod
    def preflight(cls, recipe: Recipe) -> list[str]:
        """Only ``runtime.mode: sync``: one process cannot overlap rollout and training."""
        if recipe.runtime.mode != "sync":
            return [
                f"runtime.mode '{recipe.runtime.mode}': the embedded loop runs rollout and training one "
                "after the other in one process, so it cannot overlap them (T1 Appendix 12); set "
                "runtime.mode to sync, or runtime.kind to ray"
            ]
        return []


def runtime_problems(recipe: Recipe) -> list[str]:
    """What stops the recipe's ``runtime`` section from running here, one line each (empty: runnable)."""
    missing = RUNTIMES.problem(recipe.runtime.kind)
    if missing is not None:
        return [missing]
    return RUNTIMES.load(recipe.runtime.kind).preflight(recipe)


__all__ = ["RUNTIMES", "EmbeddedRuntime", "runtime_problems"]
