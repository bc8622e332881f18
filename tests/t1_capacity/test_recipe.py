"""The capacity model read from the project's recipes (t1_spec adapter)."""

from pathlib import Path

import pytest

import t1_spec
from t1_capacity import PAPER_CONSTANTS, PAPER_MODEL, check_plan, load

ROOT = Path(__file__).resolve().parents[2]
PROD = ROOT / "recipes" / "t1-122b.yaml"
TINY = ROOT / "recipes" / "tiny-cpu.yaml"
CP2 = ["plan.cp=2", "plan.dp=4"]  # same 64 training devices, kappa 2


def test_production_recipe_is_the_paper_model():
    inputs = load(PROD)
    assert inputs.model.expert_params == PAPER_MODEL.expert_params
    assert inputs.model.dense_params == PAPER_MODEL.dense_params
    assert inputs.plan.training_devices == 64 and inputs.devices == 128
    assert inputs.plan.token_wall == 86_016 and inputs.plan.cp == 4
    assert inputs.plan.batch_size == 512


def test_kappa4_admits_84k_wall():
    inputs = load(PROD)
    verdict = check_plan(inputs.model, inputs.plan, inputs.constants)
    assert verdict.fits, verdict.reason()


def test_kappa2_is_refused():
    inputs = load(PROD, CP2)
    verdict = check_plan(inputs.model, inputs.plan, inputs.constants)
    assert not verdict.fits
    assert "raise cp 2 -> 4" in verdict.advice


def test_kappa2_fails_on_the_logit_buffer_at_the_default_alpha():
    inputs = load(
        PROD, [*CP2, f"plan.alpha={PAPER_CONSTANTS.alpha}", f"plan.b0_gib={PAPER_CONSTANTS.b0_gib}"]
    )
    verdict = check_plan(inputs.model, inputs.plan, inputs.constants)
    assert not verdict.fits
    assert verdict.actor.binding.name == "logit_buffer"


def test_tiny_cpu_recipe_fits_co_resident():
    inputs = load(TINY)
    verdict = check_plan(inputs.model, inputs.plan, inputs.constants)
    assert inputs.plan.offload == "none"
    assert verdict.fits and verdict.coresident_gib is not None


def test_invalid_recipe_raises_recipe_error():
    with pytest.raises(t1_spec.RecipeError):
        load(PROD, ["plan.cp=2"])  # 2*4*2*2 = 32 != 64 training devices
    with pytest.raises(FileNotFoundError):
        load(ROOT / "recipes" / "no-such.yaml")


def test_grpo_recipe_checks_the_actor_only():
    """GRPO trains no critic (T1 §9 ablation): only the actor must fit."""
    inputs = load(ROOT / "recipes" / "grpo.yaml")
    assert inputs.plan.critic is False
    verdict = check_plan(inputs.model, inputs.plan, inputs.constants)
    assert verdict.critic is None and verdict.fits
    assert verdict.binding is verdict.actor
