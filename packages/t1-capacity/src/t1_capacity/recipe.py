"""Adapter from a validated ``t1_spec`` recipe to the capacity model's own small types."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from t1_capacity.footprint import PAPER_CONSTANTS, CapacityConstants
from t1_capacity.plan import Plan
from t1_capacity.shapes import ModelShape

MODEL_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_layers",
    "num_experts",
    "top_k",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
    "full_attention_interval",
    "tie_word_embeddings",
    "declared_expert_params",
    "declared_dense_params",
)


@dataclass(frozen=True)
class CapacityInputs:
    """Everything the capacity model reads from a recipe.

    Attributes:
        model: the model shape.
        plan: the training plan (token wall, budget, offload included).
        constants: alpha and b0 from the recipe, other constants at their defaults.
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


def from_recipe(recipe: Any, source: str = "<recipe>") -> CapacityInputs:
    """Build the capacity inputs from a ``t1_spec.Recipe`` (or any object with the same attributes).

    Reads ``recipe.model`` (shape fields); ``recipe.plan`` (``devices, inference_devices, tp, pp, cp, dp,
    ep, etp, token_wall, memory_budget_gib, offload, alpha, b0_gib``); ``recipe.ppo.batch_size`` (512 when
    absent) and ``recipe.ppo.samples_per_task`` (1 when absent); ``recipe.ppo.advantage.estimator``
    (``grpo``: no critic is checked); ``recipe.engine.tp`` (inference replica size, 1 when absent).

    Args:
        recipe: the validated recipe.
        source: a label for messages, e.g. the file path.

    Returns:
        The model shape, the plan and the constants.

    Raises:
        AttributeError: when a required model or plan field is missing.
    """
    m = recipe.model
    model = ModelShape(**{k: getattr(m, k) for k in MODEL_FIELDS if hasattr(m, k)})
    p = recipe.plan
    ppo = getattr(recipe, "ppo", None)
    batch = int(getattr(ppo, "batch_size", 512)) if ppo is not None else 512
    samples_per_task = int(getattr(ppo, "samples_per_task", 1)) if ppo is not None else 1
    estimator = getattr(getattr(ppo, "advantage", None), "estimator", "gae")
    plan = Plan(
        tp=p.tp,
        pp=p.pp,
        cp=p.cp,
        dp=p.dp,
        ep=p.ep,
        etp=getattr(p, "etp", 1),
        token_wall=p.token_wall,
        memory_budget_gib=float(p.memory_budget_gib),
        offload=getattr(p, "offload", "forced"),
        inference_devices=getattr(p, "inference_devices", 0),
        batch_size=batch,
        samples_per_task=samples_per_task,
        critic=estimator != "grpo",
    )
    constants = CapacityConstants(
        alpha=float(getattr(p, "alpha", PAPER_CONSTANTS.alpha)),
        b0_gib=float(getattr(p, "b0_gib", PAPER_CONSTANTS.b0_gib)),
    )
    devices = int(getattr(p, "devices", plan.training_devices + plan.inference_devices))
    engine = getattr(recipe, "engine", None)
    replica = int(getattr(engine, "tp", 1) or 1) if engine is not None else 1
    return CapacityInputs(model, plan, constants, devices, replica, source)


def load(path: str | Path, overrides: list[str] | None = None) -> CapacityInputs:
    """Load a recipe file through ``t1_spec.load_recipe`` and adapt it.

    Args:
        path: the recipe YAML.
        overrides: OmegaConf dotlist overrides, e.g. ``["plan.cp=2"]``.

    Raises:
        t1_spec.RecipeError: the recipe does not validate (the CLI maps it to exit code 2).
        FileNotFoundError: no such file.
    """
    import t1_spec  # local: keeps ``import t1_capacity`` light and usable without a recipe

    if not Path(path).exists():
        raise FileNotFoundError(f"recipe not found: {path}")
    recipe = t1_spec.load_recipe(path, list(overrides or []))
    return from_recipe(recipe, str(path))
