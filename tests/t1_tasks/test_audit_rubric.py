"""The audit rubric reproduces T1 Fig. 4's weights and the primer's worked example of the arithmetic."""

from __future__ import annotations

import math

import pytest

from t1_tasks.audit import DIMENSIONS, HARD_REJECTS, critical_failures, quality_score, weighted_contributions

# The primer's worked example (paper/001, "Apply weights: 0.20 x 4 = 0.8, ..."), dimension by dimension: the
# primer lists the weights in this order and names the 0.2 contribution "clarity".
PRIMER_SCORES = {
    "instruction_verifier_alignment": 4,  # 0.20 x 4 = 0.8
    "verifier_fairness": 3,  # 0.15 x 3 = 0.45
    "solution_correctness": 5,  # 0.15 x 5 = 0.75
    "instruction_clarity": 2,  # 0.10 x 2 = 0.2
    "verifier_coverage": 5,  # 0.10 x 5 = 0.5
    "solution_reasonableness": 3,  # 0.10 x 3 = 0.3
    "instruction_completeness": 4,  # 0.10 x 4 = 0.4
    "task_value": 5,  # 0.10 x 5 = 0.5
}
PRIMER_CONTRIBUTIONS = [0.8, 0.45, 0.75, 0.2, 0.5, 0.3, 0.4, 0.5]


def test_weights_sum_to_one_and_match_fig4_facets():
    assert math.isclose(sum(d.weight for d in DIMENSIONS), 1.0)
    facets: dict[str, float] = {}
    for d in DIMENSIONS:
        facets[d.facet] = facets.get(d.facet, 0.0) + d.weight
    # Fig. 4: verifier 45%, solution 25%, instruction 20%, task value 10%.
    assert {k: round(v, 6) for k, v in facets.items()} == {
        "verifier": 0.45,
        "solution": 0.25,
        "instruction": 0.20,
        "value": 0.10,
    }


def test_paper_weights_of_the_named_dimensions():
    w = {d.name: d.weight for d in DIMENSIONS}
    # T1 §3.2: alignment 20%, fairness 15%, coverage 10%, correctness 15%, reasonableness 10%.
    assert (w["instruction_verifier_alignment"], w["verifier_fairness"], w["verifier_coverage"]) == (
        0.20,
        0.15,
        0.10,
    )
    assert (w["solution_correctness"], w["solution_reasonableness"]) == (0.15, 0.10)
    assert len(DIMENSIONS) == 8


def test_primer_worked_example_quality_score_is_3_9():
    parts = weighted_contributions(PRIMER_SCORES)
    assert sorted(round(v, 10) for v in parts.values()) == sorted(PRIMER_CONTRIBUTIONS)
    assert quality_score(PRIMER_SCORES) == pytest.approx(3.9, abs=1e-12)


def test_primer_lowest_critical_contribution_is_clarity_0_2():
    parts = weighted_contributions(PRIMER_SCORES)
    critical = {d.name for d in DIMENSIONS if d.critical_min is not None}
    lowest = min(critical, key=lambda n: parts[n])
    assert lowest == "instruction_clarity"
    assert parts[lowest] == pytest.approx(0.2)
    assert parts[lowest] > 0.1  # the primer's hypothetical threshold: the task passes
    assert critical_failures(PRIMER_SCORES) == {}


def test_task_value_is_the_only_dimension_exempt_from_the_critical_minimum():
    exempt = [d.name for d in DIMENSIONS if d.critical_min is None]
    assert exempt == ["task_value"]
    assert critical_failures({"task_value": 1}) == {}
    for d in DIMENSIONS:
        assert d.critical_min_source  # every minimum says where it comes from ("chosen" or exempt)


def test_a_one_on_a_critical_dimension_fails_whatever_the_rest():
    scores = dict.fromkeys(PRIMER_SCORES, 5) | {"verifier_coverage": 1}
    assert quality_score(scores) == pytest.approx(5 - 0.10 * 4)
    assert critical_failures(scores) == {"verifier_coverage": 1}


def test_partial_score_is_the_weighted_mean_of_the_scored_dimensions():
    # (0.15 * 5 + 0.10 * 2) / (0.15 + 0.10) = 0.95 / 0.25 = 3.8
    assert quality_score({"solution_correctness": 5, "verifier_coverage": 2}) == pytest.approx(3.8)
    assert quality_score({}) is None


def test_scores_outside_one_to_five_or_unknown_dimensions_are_refused():
    with pytest.raises(ValueError, match="1-5"):
        quality_score({"task_value": 6})
    with pytest.raises(ValueError, match="unknown audit dimensions"):
        quality_score({"vibes": 3})


def test_the_four_hard_rejects_of_the_paper():
    assert set(HARD_REJECTS) == {"hidden_requirement", "test_leakage", "solution_shortcut", "weak_verifier"}
