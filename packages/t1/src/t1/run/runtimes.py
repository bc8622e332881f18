"""The runtimes, by ``runtime.kind``: where a run's parts live under the one step driver (T1 §7).

`RUNTIMES` maps the recipe's ``runtime.kind`` to the class that implements `t1.run.runtime.Runtime`, as the
other seams' registries do: ``from_spec(recipe)`` builds it, and ``preflight(recipe)`` lists, one line
each, what of the recipe it cannot run here. The step loop itself is `t1.run.driver.Run`, the same for
every runtime; adding a runtime is one module and one entry here.
"""

from __future__ import annotations

from t1.run.staleness import staleness_problems
from t1_spec import Recipe, Registry

RUNTIMES = Registry(
    "runtime.kind",
    {
        "embedded": "t1.run.inprocess:InProcessRuntime",
        "ray": "t1.run.ray.runtime:RayRuntime",
    },
)
"""``runtime.kind`` -> the `t1.run.runtime.Runtime` class (``from_spec(recipe)``, ``preflight(recipe)``)."""


def runtime_problems(recipe: Recipe) -> list[str]:
    """What stops the recipe's ``runtime`` section from running here, one line each (empty: runnable)."""
    missing = RUNTIMES.problem(recipe.runtime.kind)
    if missing is not None:
        return [missing]
    return RUNTIMES.load(recipe.runtime.kind).preflight(recipe) + staleness_problems(recipe)


__all__ = ["RUNTIMES", "runtime_problems"]
