"""Device split T_step(n) = max(R/n, C/(G-n)) (T1 §7) against the paper's measurements."""

import pytest

from t1_capacity import balance_point, optimal_split, step_time
from t1_capacity.split import generation_work_from_rate, training_work_from_time

RATE = 4.35  # groups/min for one replica (T1 §7)
GROUPS = 256  # the batch of that earlier configuration: 256 / 4.35 = 58.9 min


@pytest.mark.parametrize("g_replicas", [4, 6, 8, 16])
def test_one_to_three_replicas_cuts_step_60_to_23(g_replicas):
    """T1 §7: 1 -> 3 replicas: generation 58.9 -> 19.6 min, step ~60 -> ~23 min (x2.6), same hardware.

    Units: one replica = one unit of G. C is set by the training time the 3-replica step shows (23 min);
    the step at one replica then follows from the max.
    """
    r = generation_work_from_rate(GROUPS, RATE, replica_devices=1)
    assert r == pytest.approx(58.9, abs=0.05)
    c = training_work_from_time(23.0, g_replicas - 3)
    one = step_time(1, r, c, g_replicas)
    three = step_time(3, r, c, g_replicas)
    assert three.generation_min == pytest.approx(19.6, abs=0.05)
    assert one.step_min == pytest.approx(60, abs=1.5)
    assert one.bound == "generation"
    assert three.step_min == pytest.approx(23, abs=0.5)
    assert one.step_min / three.step_min == pytest.approx(2.6, abs=0.06)


def test_balance_point_and_optimum():
    r, c, g = 100.0, 300.0, 40
    assert balance_point(r, c, g) == pytest.approx(10.0)
    best = optimal_split(r, c, g)
    assert best.inference_devices == 10
    assert best.step_min == pytest.approx((r + c) / g)
    assert best.slack_min == pytest.approx(0.0)


def test_granularity_and_fit_constraint():
    r, c, g = 100.0, 300.0, 40
    best = optimal_split(r, c, g, granularity=8)
    assert best.inference_devices in (8, 16)
    assert best.step_min == pytest.approx(min(max(r / 8, c / 32), max(r / 16, c / 24)))
    only_big_training = optimal_split(r, c, g, granularity=8, training_fits=lambda t: t >= 32)
    assert only_big_training.inference_devices == 8


def test_slack_is_the_idle_partition():
    s = step_time(20, 320.0, 41 * 20, 40)  # 16 min generation hidden under 41 min of training
    assert s.generation_min == pytest.approx(16.0)
    assert s.training_min == pytest.approx(41.0)
    assert s.bound == "training" and s.slack_min == pytest.approx(25.0)


def test_invalid_split_is_refused():
    with pytest.raises(ValueError, match="must be in"):
        step_time(0, 1.0, 1.0, 4)
    with pytest.raises(ValueError, match="no inference size"):
        optimal_split(1.0, 1.0, 4, training_fits=lambda t: False)


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda: balance_point(0.0, 0.0, 8), "both 0"),
        (lambda: balance_point(float("nan"), 1.0, 8), "generation_work"),
        (lambda: balance_point(1.0, -1.0, 8), "training_work"),
        (lambda: balance_point(1.0, 1.0, 1), "devices"),
        (lambda: step_time(2, float("inf"), 1.0, 8), "generation_work"),
        (lambda: step_time(2, 1.0, float("nan"), 8), "training_work"),
        (lambda: optimal_split(1.0, 1.0, 8, granularity=0), "granularity"),
        (lambda: optimal_split(1.0, 1.0, 8, min_training=0), "min_training"),
        (lambda: optimal_split(float("nan"), 1.0, 8), "generation_work"),
        (lambda: generation_work_from_rate(256, float("nan"), 1), "groups_per_min_per_replica"),
        (lambda: generation_work_from_rate(-1, 4.35, 1), "groups"),
        (lambda: generation_work_from_rate(256, 4.35, 0), "replica_devices"),
    ],
)
def test_bad_split_inputs_are_refused_naming_the_argument(call, named):
    """Issue: balance_point(0, 0, G) raised ZeroDivisionError; nan work gave a nan step."""
    with pytest.raises(ValueError, match=named):
        call()
