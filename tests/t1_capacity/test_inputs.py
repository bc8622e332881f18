"""Bad inputs to the capacity model are refused with a ValueError naming the argument, never a verdict."""

import math

import pytest

from t1_capacity import (
    PAPER_CONSTANTS,
    PAPER_MODEL,
    CapacityConstants,
    ModelShape,
    Plan,
    PlanError,
    balance_point,
    check_plan,
    footprint,
    search_plans,
)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("alpha", -1.0),
        ("alpha", math.nan),
        ("alpha", math.inf),
        ("b0_gib", -0.5),
        ("b0_gib", math.nan),
        ("weight_bytes", 0.0),
        ("grad_bytes", -4.0),
        ("optimizer_bytes", math.nan),
        ("logit_bytes", math.inf),
        ("vocab_pad_multiple", 0),
        ("vocab_pad_multiple", 1.5),
    ],
)
def test_constants_refuse_bad_values_naming_the_field(field, value):
    """Issue: CapacityConstants(alpha=-1) was accepted; a negative activation term has no meaning (Eq. 21)."""
    with pytest.raises(ValueError, match=field):
        CapacityConstants(**{field: value})


def test_constants_allow_zero_activation_and_residue():
    """alpha = b0 = 0 is the static footprint alone (the calibration's split and Megatron's cross-check)."""
    c = CapacityConstants(alpha=0.0, b0_gib=0.0)
    assert c.alpha == 0.0 and c.b0_gib == 0.0


@pytest.mark.parametrize("budget", [math.nan, math.inf, 0.0, -95.0])
def test_nan_budget_is_refused_not_read_as_does_not_fit(budget):
    """Issue: memory_budget_gib=nan silently gave "does not fit" (every comparison with NaN is false)."""
    with pytest.raises(PlanError, match="memory_budget_gib"):
        Plan(tp=2, pp=4, cp=4, dp=2, ep=16, memory_budget_gib=budget)


def test_finite_budget_still_checks():
    """Control: the production plan at M = 95 GiB is checked and fits (T1 §7.1)."""
    assert check_plan(PAPER_MODEL, Plan(tp=2, pp=4, cp=4, dp=2, ep=16), PAPER_CONSTANTS).fits


@pytest.mark.parametrize(
    ("field", "value"), [("batch_size", 0), ("samples_per_task", -1), ("batch_size", 2.5)]
)
def test_plan_refuses_a_batch_that_cannot_be_split(field, value):
    with pytest.raises(PlanError, match=field):
        Plan(**{field: value})


def test_balance_point_of_no_work_is_refused_not_zero_division():
    """Issue: balance_point(0, 0, G) raised ZeroDivisionError."""
    with pytest.raises(ValueError, match="generation_work and training_work"):
        balance_point(0.0, 0.0, 8)


def test_search_over_zero_devices_is_refused():
    """0 training devices is an error, not "use the recipe's own count"."""
    with pytest.raises(ValueError, match="training_devices"):
        search_plans(PAPER_MODEL, Plan(), PAPER_CONSTANTS, training_devices=0)


# --- library input checks: refused naming the argument, never priced ----------------------------------------


@pytest.mark.parametrize(
    ("value", "error"), [(-5, PlanError), (-1, PlanError), (2.5, TypeError), (True, TypeError)]
)
def test_plan_refuses_bad_inference_devices(value, error):
    """Issue: check_plan accepted inference_devices=-5; n counts devices, an integer >= 0 (T1 §7.5)."""
    with pytest.raises(error, match="inference_devices"):
        check_plan(PAPER_MODEL, Plan(tp=2, pp=4, cp=4, dp=2, ep=16, inference_devices=value), PAPER_CONSTANTS)


def test_plan_allows_co_located_and_disjoint_inference():
    assert Plan(inference_devices=0).inference_devices == 0
    assert Plan(tp=2, pp=4, cp=4, dp=2, ep=16, inference_devices=64).inference_devices == 64


@pytest.mark.parametrize(("field", "value"), [("tp", True), ("cp", 2.0), ("dp", "2"), ("token_wall", 1.5)])
def test_plan_refuses_non_integer_degrees(field, value):
    """A bool or a float is not a device count: tp=True is not read as tp=1."""
    with pytest.raises(TypeError, match=field):
        Plan(**{field: value})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("hidden_size", 0),
        ("hidden_size", -64),
        ("vocab_size", 0),
        ("num_layers", 0),
        ("num_attention_heads", 0),
        ("num_key_value_heads", 0),
        ("head_dim", 0),
        ("full_attention_interval", 0),
        ("num_experts", -1),
        ("top_k", 0),  # routed model: top_k >= 1
        ("top_k", 257),  # more than E = 256
        ("moe_intermediate_size", 0),  # routed model: experts have a width
        ("shared_expert_intermediate_size", -1),
        ("linear_num_value_heads", 0),  # the model has Gated DeltaNet layers
        ("linear_conv_kernel_dim", 0),
        ("declared_expert_params", -1.0),
        ("declared_dense_params", math.nan),
    ],
)
def test_model_shape_refuses_sizes_that_price_nothing(field, value):
    """Issue: ModelShape(hidden_size=0) was priced as "fits" (every parameter term is 0)."""
    with pytest.raises(ValueError, match=field):
        ModelShape(**{field: value})


@pytest.mark.parametrize(
    ("field", "value"),
    [("hidden_size", True), ("num_layers", 48.0), ("vocab_size", "248320"), ("qk_norm", 1)],
)
def test_model_shape_refuses_wrong_types(field, value):
    with pytest.raises(TypeError, match=field):
        ModelShape(**{field: value})


def test_dense_model_shape_is_still_accepted():
    """num_experts = 0 (a dense GPT): top_k and the expert width may be 0, no Gated DeltaNet heads needed."""
    gpt = ModelShape(
        num_experts=0,
        top_k=0,
        moe_intermediate_size=0,
        full_attention_interval=1,
        linear_num_key_heads=0,
        linear_num_value_heads=0,
        declared_expert_params=None,
        declared_dense_params=None,
    )
    assert gpt.expert_params == 0


@pytest.mark.parametrize("stage", [True, False, 1.0, "0"])
def test_footprint_refuses_a_stage_that_is_not_an_integer(stage):
    """Issue: footprint(stage=True) priced stage 1 (bool is an int subclass)."""
    with pytest.raises(TypeError, match="stage"):
        footprint(PAPER_MODEL, Plan(tp=2, pp=4, cp=4, dp=2, ep=16), PAPER_CONSTANTS, stage=stage)


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ((None, Plan(), PAPER_CONSTANTS), "model"),
        ((PAPER_MODEL, {"tp": 2}, PAPER_CONSTANTS), "plan"),
        ((PAPER_MODEL, Plan(tp=2, pp=4, cp=4, dp=2, ep=16), 67_584.0), "c"),
    ],
)
def test_check_plan_refuses_arguments_of_the_wrong_type(args, named):
    with pytest.raises(TypeError, match=f"{named} must be"):
        check_plan(*args)


@pytest.mark.parametrize("value", [True, 2.0, "64"])
def test_search_refuses_a_device_count_that_is_not_an_integer(value):
    with pytest.raises(TypeError, match="training_devices"):
        search_plans(PAPER_MODEL, Plan(), PAPER_CONSTANTS, training_devices=value)
