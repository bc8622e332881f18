"""Dense reward, ratio variant and the fallback rule (T1 §5.2)."""

import math
from dataclasses import dataclass

import pytest

from t1_reward import (
    AssertionOutcome,
    AssertionStatus,
    FallbackCause,
    Report,
    compute_reward,
    dense_reward,
    ratio_reward,
)
from t1_spec import BinaryRewardSpec, DenseRewardSpec, RatioRewardSpec

SPECS = {"dense": DenseRewardSpec, "ratio": RatioRewardSpec, "binary": BinaryRewardSpec}


def Spec(kind: str, **fields):  # noqa: N802 - reads like the spec it builds
    """The recipe's reward section of ``kind`` (a real t1_spec spec, so its defaults and rules apply)."""
    return SPECS[kind](**fields)


DENSE = Spec("dense")


def report_with(passed: int, failed: int, *, skipped: int = 0, binary: float | None = None) -> Report:
    statuses = [AssertionStatus.PASSED] * passed + [AssertionStatus.FAILED] * failed
    statuses += [AssertionStatus.SKIPPED] * skipped
    outcomes = tuple(AssertionOutcome(f"t{i}", s) for i, s in enumerate(statuses))
    return Report(outcomes=outcomes, binary=binary, source="ctrf", fallback=None, detail=None)


def test_absolute_count_not_ratio():
    # T1 §5.2: 10 of 20 (hard task) and 2 of 4 (easy task) both have ratio 0.5, yet score 0.5 and 0.1 at S=20.
    hard = compute_reward(report_with(10, 10), DENSE)
    easy = compute_reward(report_with(2, 2), DENSE)
    assert hard.value == pytest.approx(0.5)
    assert easy.value == pytest.approx(0.1)
    assert (hard.kind, hard.passed, hard.total) == ("dense", 10, 20)


def test_primer_examples_each_assertion_adds_one_over_s():
    # Primer: P = 5 -> 0.25; later P = 7 -> 0.35, an increase of 0.10 for two more verified steps.
    assert dense_reward(5, 20) == pytest.approx(0.25)
    assert dense_reward(7, 20) == pytest.approx(0.35)
    assert dense_reward(7, 20) - dense_reward(5, 20) == pytest.approx(2 / 20)


def test_dense_reward_is_not_clamped_above_scale():
    # S = 20 sits near p90 of assertion counts (max ~35): a task with 30 passing scores 1.5.
    assert dense_reward(30, 20) == pytest.approx(1.5)


@pytest.mark.parametrize(("passed", "scale"), [(-1, 20), (3, 0), (3, -20), (3, float("nan"))])
def test_dense_reward_rejects_invalid_arguments(passed, scale):
    with pytest.raises(ValueError):
        dense_reward(passed, scale)


def test_skipped_assertions_count_in_total_not_in_passed():
    r = compute_reward(report_with(3, 1, skipped=2), DENSE)
    assert (r.passed, r.total) == (3, 6)
    assert r.value == pytest.approx(3 / 20)


@pytest.mark.parametrize(
    ("passed", "total", "binary", "expected"),
    [
        (5, 10, 0.0, 0.2),  # max(0, 0.4 * 0.5)
        (10, 10, 0.0, 0.4),  # all passed but b = 0: the ratio term only
        (0, 10, 1.0, 1.0),  # b dominates
        (10, 10, 1.0, 1.0),
        (4, 4, 1.5, 1.5),  # b > 1 widens the clamp to [0, b]
        (0, 4, -1.0, 0.0),  # clamped at 0
        (0, 0, 0.0, 0.0),  # no assertions: ratio term 0
    ],
)
def test_ratio_variant_max_b_and_scaled_ratio_clamped(passed, total, binary, expected):
    assert ratio_reward(passed, total, binary) == pytest.approx(expected)


def test_ratio_variant_caps_every_task_at_one_when_solved():
    # §5.2: the ratio formulation caps every solved task at 1.0, erasing the 10/20 vs 2/4 distinction.
    assert ratio_reward(20, 20, 1.0) == ratio_reward(4, 4, 1.0) == 1.0


def test_ratio_reward_rejects_passed_above_total():
    with pytest.raises(ValueError):
        ratio_reward(5, 4, 0.0)


def test_compute_ratio_uses_spec_coefficient_and_binary():
    r = compute_reward(report_with(3, 1, binary=0.0), Spec("ratio", coefficient=0.8))
    assert r.kind == "ratio"
    assert r.value == pytest.approx(0.8 * 3 / 4)


def test_compute_ratio_derives_binary_from_outcomes_when_no_reward_file():
    solved = compute_reward(report_with(4, 0), Spec("ratio"))
    unsolved = compute_reward(report_with(3, 1), Spec("ratio"))
    assert solved.value == pytest.approx(1.0)
    assert unsolved.value == pytest.approx(0.4 * 3 / 4)


def test_compute_binary_kind():
    assert compute_reward(report_with(1, 3, binary=1.0), Spec("binary")).value == 1.0
    assert compute_reward(report_with(1, 3), Spec("binary")).value == 0.0


@pytest.mark.parametrize("cause", list(FallbackCause))
@pytest.mark.parametrize("kind", ["dense", "ratio", "binary"])
def test_solved_task_with_unusable_report_never_scores_zero(cause, kind):
    report = Report(outcomes=(), binary=1.0, source="reward.txt", fallback=cause, detail="x")
    r = compute_reward(report, Spec(kind))
    assert r.value == 1.0
    assert r.kind == "binary_fallback"
    assert r.fallback is cause


def test_fallback_ignores_partial_outcomes_of_a_timed_out_verifier():
    partial = report_with(2, 0, binary=0.0)
    timed_out = Report(
        partial.outcomes, 0.0, "reward.txt", FallbackCause.VERIFIER_TIMEOUT, "verifier timed out"
    )
    r = compute_reward(timed_out, DENSE)
    assert r.value == 0.0 and r.passed == 2 and r.kind == "binary_fallback"


@pytest.mark.parametrize("kind", ["dense", "ratio", "binary"])
def test_a_zero_written_by_a_crashed_verifier_is_not_the_agents_zero(kind):
    crashed = Report(
        outcomes=(),
        binary=0.0,
        source="reward.json",
        fallback=FallbackCause.VERIFIER_CRASH,
        detail="killed by signal 24",
    )
    r = compute_reward(crashed, Spec(kind))
    assert r.value is None and r.kind == "none" and r.fallback is FallbackCause.VERIFIER_CRASH
    # a solved task still never scores 0, even when the verifier crashed afterwards
    solved = Report(
        outcomes=(),
        binary=1.0,
        source="reward.json",
        fallback=FallbackCause.VERIFIER_CRASH,
        detail="killed by signal 24",
    )
    assert compute_reward(solved, Spec(kind)).value == 1.0


def test_no_outcome_at_all_is_none_not_zero():
    report = Report(outcomes=(), binary=None, source="none", fallback=FallbackCause.MISSING, detail="nothing")
    r = compute_reward(report, DENSE)
    assert r.value is None
    assert r.kind == "none"
    assert r.fallback is FallbackCause.MISSING


@dataclass(frozen=True)
class SparseSpec:  # not a t1_spec reward spec: what a stale caller might pass
    kind: str = "sparse"


def test_unknown_kind_is_a_programmer_error():
    with pytest.raises(ValueError, match="unknown reward kind"):
        compute_reward(report_with(1, 0), SparseSpec())


def test_accepts_the_t1_spec_reward_sections():
    from t1_spec.reward import BinaryRewardSpec, DenseRewardSpec, RatioRewardSpec

    report = report_with(10, 10, binary=0.0)
    assert compute_reward(report, DenseRewardSpec()).value == pytest.approx(0.5)  # S = 20 by default
    assert compute_reward(report, RatioRewardSpec()).value == pytest.approx(0.4 * 10 / 20)
    assert compute_reward(report, BinaryRewardSpec()).value == 0.0


@pytest.mark.parametrize("binary", [-1.0, 2.5, math.nan])
def test_out_of_range_binary_is_never_a_reward(binary):
    """A binary outcome lies in [0, 1]; a hand-built report with b = -1 or 2.5 is a programmer error."""
    report = Report(outcomes=(), binary=binary, source="reward.json", fallback=FallbackCause.MISSING)
    for kind in ("dense", "ratio", "binary"):
        with pytest.raises(ValueError, match=r"report.binary \(b\) must lie in \[0, 1\]"):
            compute_reward(report, Spec(kind))


def test_each_reward_spec_kind_gives_its_formula():
    # P = 3 of T = 4, b = 0: dense 3/20 (Eq. 20), ratio max(0, 0.4 * 3/4) = 0.3, binary b = 0.
    report = report_with(3, 1, binary=0.0)
    got = {kind: compute_reward(report, Spec(kind)) for kind in ("dense", "ratio", "binary")}
    assert got["dense"].value == pytest.approx(3 / 20) and got["dense"].kind == "dense"
    assert got["ratio"].value == pytest.approx(0.3) and got["ratio"].kind == "ratio"
    assert got["binary"].value == 0.0 and got["binary"].kind == "binary"


def test_the_ratio_coefficient_is_read_from_the_spec():
    from pathlib import Path

    from t1_reward import RATIO_COEFFICIENT
    from t1_spec import load_recipe

    tiny = Path(__file__).resolve().parents[2] / "recipes" / "tiny-cpu.yaml"
    recipe = load_recipe(tiny, ["reward={kind: ratio, coefficient: 0.6}"])
    assert isinstance(recipe.reward, RatioRewardSpec) and recipe.reward.coefficient == 0.6
    # P/T = 1/2, b = 0: c = 0.6 gives 0.3, the paper's 0.4 would give 0.2
    assert compute_reward(report_with(1, 1, binary=0.0), recipe.reward).value == pytest.approx(0.3)
    assert RATIO_COEFFICIENT == RatioRewardSpec().coefficient == 0.4  # one home for the paper's default
