"""Bad inputs to the capacity model are refused with a ValueError naming the argument, never a verdict."""

import math

import pytest

from t1_capacity import (
    PAPER_CONSTANTS,
    PAPER_MODEL,
    CapacityConstants,
    Plan,
    PlanError,
    balance_point,
    check_plan,
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
