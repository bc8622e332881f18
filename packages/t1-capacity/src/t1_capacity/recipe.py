"""Adapter from a validated ``t1_spec`` recipe to the capacity model's own small types."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import t1_spec
from t1_capacity.footprint import CapacityConstants
from t1_capacity.layouts import backend_constants
from t1_capacity.plan import Plan
from t1_capacity.shapes import ModelShape
from t1_spec import GRPOAdvantageSpec, Recipe, SGLangEngineSpec
from t1_spec.plan import PlanSpec


@dataclass(frozen=True)
class CapacityInputs:
    """Everything the capacity model reads from a recipe.

    Attributes:
        model: the model shape.
        plan: the training plan (token wall, budget, offload included).
        constants: alpha and b0 from the recipe, the byte layout of its trainer backend and dtype
            (`t1_capacity.layouts.backend_constants`).
        devices: G, all devices of the run.
        replica_devices: devices per inference replica (``engine.tp`` when the recipe has one, else 1); the
            inference partition grows in these steps.
        source: where the recipe came from (for messages).
    """

    model: ModelShape
    plan: Plan
    constants: CapacityConstants
    devices: int
    replica_devices: int = 1
    source: str = "<recipe>"


def from_recipe(recipe: Recipe, source: str = "<recipe>") -> CapacityInputs:
    """Build the capacity inputs from a validated ``t1_spec.Recipe``.

    Reads ``recipe.model`` (``ModelShape.from_spec``); ``recipe.plan`` (``devices, inference_devices, tp, pp,
    cp, dp, ep, etp, token_wall, memory_budget_gib, offload, alpha, b0_gib``); ``recipe.ppo.batch_size`` and
    ``recipe.ppo.samples_per_task``; alpha and b0 each at the spec's default: the backend's stored calibration
    for the trainer's machine kind (``coefficients/<backend>-<cpu|cuda>.json``) where there is one
    (`backend_constants`; a value set in the recipe wins; megatron on CUDA keeps Eq. 21's alpha and b0);
    ``recipe.ppo.advantage`` (GRPO trains no critic, so none is checked); and the inference replica size,
    ``engine.tp`` for an SGLang engine and 1 for the embedded one.

    Args:
        recipe: the validated recipe.
        source: a label for messages, e.g. the file path.

    Returns:
        The model shape, the plan, the constants and the device counts.
    """
    p, ppo = recipe.plan, recipe.ppo
    plan = Plan(
        tp=p.tp,
        pp=p.pp,
        cp=p.cp,
        dp=p.dp,
        ep=p.ep,
        etp=p.etp,
        token_wall=p.token_wall,
        memory_budget_gib=float(p.memory_budget_gib),
        offload=p.offload,
        inference_devices=p.inference_devices,
        batch_size=ppo.batch_size,
        samples_per_task=ppo.samples_per_task,
        critic=not isinstance(ppo.advantage, GRPOAdvantageSpec),
    )
    defaults = PlanSpec.model_fields
    constants = backend_constants(
        recipe.trainer.backend,
        recipe.model.dtype,
        device=recipe.trainer.device,
        alpha=float(p.alpha),
        b0_gib=float(p.b0_gib),
        calibrated_activations=p.alpha == defaults["alpha"].default,
        calibrated_b0=p.b0_gib == defaults["b0_gib"].default,
    )
    replica = recipe.engine.tp if isinstance(recipe.engine, SGLangEngineSpec) else 1
    return CapacityInputs(ModelShape.from_spec(recipe.model), plan, constants, p.devices, replica, source)


def load(path: str | Path, overrides: list[str] | None = None) -> CapacityInputs:
    """Load a recipe file through ``t1_spec.load_recipe`` and adapt it.

    Args:
        path: the recipe YAML.
        overrides: OmegaConf dotlist overrides, e.g. ``["plan.cp=2"]``.

    Raises:
        t1_spec.RecipeError: the recipe does not validate (the CLI maps it to exit code 2).
        FileNotFoundError: no such file.
    """
    if not Path(path).exists():
        raise FileNotFoundError(f"recipe not found: {path}")
    recipe = t1_spec.load_recipe(path, list(overrides or []))
    return from_recipe(recipe, str(path))
