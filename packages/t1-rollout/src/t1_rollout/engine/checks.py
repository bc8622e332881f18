"""The embedded engine's preflight without importing torch: the registry's light check for ``engine.kind``.

`ENGINES` names `embedded_preflight` as the ``embedded`` kind's check (`t1_spec.Registry.preflight`), so
`t1 recipe validate` and the start of `t1 train` give the engine's verdict without loading torch; its lines
are those of `t1_rollout.engine.embedded.EmbeddedEngine.preflight` (a test holds the two equal).
"""

from __future__ import annotations

from t1_policy.device import device_problem
from t1_spec import EmbeddedEngineSpec, Recipe

__all__ = ["embedded_preflight"]


def embedded_preflight(recipe: Recipe) -> list[str]:
    """What stops ``recipe`` from running on the embedded engine here, one line each (empty: runnable).

    Cheap: builds no model and imports torch only for a ``cuda`` device, to check that torch sees it (the
    spec already keeps the embedded engine co-located, ``plan.inference_devices: 0``).
    """
    spec = recipe.engine
    if not isinstance(spec, EmbeddedEngineSpec):
        return [f"engine.kind '{spec.kind}': the embedded engine serves kind 'embedded' only"]
    unseen = device_problem("engine.device", spec.device)
    return [unseen] if unseen else []
