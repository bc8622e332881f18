"""The run's preflight asks the capacity model to admit a recipe's plan (T1 §7.1, Eq. 21)."""

from dataclasses import fields
from pathlib import Path

import t1_spec
from t1_capacity import PAPER_MODEL, ModelShape, admit_recipe, check_plan, load

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "recipes" / "tiny-cpu.yaml"
PROD = ROOT / "recipes" / "t1-122b.yaml"

# qk_norm is a fact of the Qwen3.5 family the spec describes, not a recipe field.
CAPACITY_ONLY = {"qk_norm"}


def test_tiny_recipe_is_admitted():
    verdict = admit_recipe(t1_spec.load_recipe(TINY))
    assert verdict.ok, verdict.message
    assert verdict.message.startswith("admitted by the capacity model")
    assert "\n" not in verdict.message


def test_two_gib_budget_on_tiny_is_refused_naming_the_binding_term():
    """``tools/check_plan`` refuses M = 2 GiB on tiny-cpu; the preflight must refuse it the same way.

    b0 is set to 0.5 GiB: the spec keeps b0 below M, and its default is the paper's 3 GiB.
    """
    recipe = t1_spec.load_recipe(TINY, ["plan.memory_budget_gib=2", "plan.b0_gib=0.5"])
    verdict = admit_recipe(recipe)
    assert not verdict.ok
    assert verdict.message.startswith("refused by the capacity model")
    # the torch trainer's actor (1.90 GiB) binds on its one LM-head chunk (0.71 GiB), above b0
    assert f"{verdict.check.binding.network} {verdict.check.binding.binding.name}" in verdict.message
    assert "actor logit_buffer" in verdict.message
    assert "smallest change:" in verdict.message
    assert "\n" not in verdict.message


def test_admission_agrees_with_plan_check():
    """One rule: the preflight's verdict and words are ``check_plan``'s on the same recipe."""
    overrides = ["plan.cp=2", "plan.dp=4"]
    inputs = load(PROD, overrides)
    plan_check = check_plan(inputs.model, inputs.plan, inputs.constants)
    verdict = admit_recipe(t1_spec.load_recipe(PROD, overrides))
    assert verdict.ok is plan_check.fits is False
    assert plan_check.reason() in verdict.message and plan_check.advice in verdict.message
    assert "raise cp 2 -> 4" in verdict.message


def test_plan_the_capacity_model_cannot_lay_out_is_refused_not_raised():
    """The capacity model also needs tp to divide the shared-expert width: tp 2 cannot split 1001 columns."""
    overrides = ["model.shared_expert_intermediate_size=1001", "model.declared_dense_params=null"]
    verdict = admit_recipe(t1_spec.load_recipe(PROD, overrides))
    assert not verdict.ok and verdict.check is None
    assert verdict.message.startswith("the capacity model cannot lay this plan out")
    assert "plan.tp=2 must divide shared_expert_intermediate_size" in verdict.message


def test_model_shape_reads_every_field_from_the_spec():
    spec = t1_spec.load_recipe(PROD).model
    shape = ModelShape.from_spec(spec)
    names = {f.name for f in fields(ModelShape)}
    assert names - CAPACITY_ONLY <= set(type(spec).model_fields)
    for name in names - CAPACITY_ONLY:
        assert getattr(shape, name) == getattr(spec, name), name
    assert shape.expert_params == PAPER_MODEL.expert_params
    assert shape.dense_params == PAPER_MODEL.dense_params
