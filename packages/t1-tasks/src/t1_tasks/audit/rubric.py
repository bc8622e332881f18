"""The audit rubric: eight weighted dimensions scored 1-5, the QualityScore, critical minimums, hard rejects.

Source: T1 §3.2 and Fig. 4 (weights; task training value is the only dimension exempt from the
critical-minimum cutoff; the four hard rejects) and the primer's worked example of the arithmetic
(QualityScore = sum of weight x score = 3.9 for its example task). Fig. 4 aggregates the weights by facet:
verifier 45% (instruction-verifier alignment 20%, fairness 15%, coverage 10%), solution 25% (correctness 15%,
reasonableness 10%), instruction 20% (two dimensions of 10%) and task value 10%.

Names: the paper names seven of the eight dimensions (the primer names the first instruction dimension
"clarity"); the second instruction dimension is not named anywhere, so ``instruction_completeness`` is a
chosen name. Critical minimums: the paper publishes none (the primer's 0.1 floor on a weighted contribution
is called hypothetical), so every value below is chosen and says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "DIMENSIONS",
    "DIMENSION_NAMES",
    "HARD_REJECTS",
    "SCORE_MAX",
    "SCORE_MIN",
    "Dimension",
    "critical_failures",
    "quality_score",
    "weighted_contributions",
]

SCORE_MIN = 1
"""Lowest score of a dimension (the rubric's 1-5 scale)."""

SCORE_MAX = 5
"""Highest score of a dimension."""


@dataclass(frozen=True)
class Dimension:
    """One audit dimension (T1 §3.2, Fig. 4).

    Attributes:
        name: the key used in audit rows and in the judge's JSON answer.
        facet: ``verifier``, ``solution``, ``instruction`` or ``value`` (Fig. 4's aggregation).
        weight: share of the QualityScore (fraction; the eight sum to 1).
        critical_min: lowest score (1-5) a task may have on this dimension and still be admitted; None for
            task value, the only dimension exempt from the cutoff (T1 §3.2).
        critical_min_source: where ``critical_min`` comes from (``"chosen"``: the paper gives no value).
        question: what the dimension asks, as the judge's prompt states it.
    """

    name: str
    facet: str
    weight: float
    critical_min: int | None
    critical_min_source: str
    question: str


DIMENSIONS: tuple[Dimension, ...] = (
    Dimension(
        "instruction_verifier_alignment",
        "verifier",
        0.20,
        3,
        "chosen: 3, stricter than the others, since a mismatch is a hidden requirement that makes the task "
        "unusable (T1 §3.2)",
        "Does the verifier enforce exactly what the public instruction asks, with no criterion the agent "
        "was never shown?",
    ),
    Dimension(
        "verifier_fairness",
        "verifier",
        0.15,
        2,
        "chosen: 2 (a 1 is a catastrophic failure)",
        "Does every correct solution pass, whatever reasonable method or formatting choice the instruction "
        "leaves open?",
    ),
    Dimension(
        "verifier_coverage",
        "verifier",
        0.10,
        2,
        "chosen: 2 (a 1 is a catastrophic failure)",
        "Do the assertions check the whole goal, so that an incomplete or wrong solution fails some of them?",
    ),
    Dimension(
        "solution_correctness",
        "solution",
        0.15,
        2,
        "chosen: 2 (a 1 is a catastrophic failure)",
        "Does the reference solution achieve the goal and pass every assertion?",
    ),
    Dimension(
        "solution_reasonableness",
        "solution",
        0.10,
        2,
        "chosen: 2 (a 1 is a catastrophic failure)",
        "Does the reference solution solve the task the way a competent engineer would, without reading or "
        "editing the tests or exploiting the verifier?",
    ),
    Dimension(
        "instruction_clarity",
        "instruction",
        0.10,
        2,
        "chosen: 2 (a 1 is a catastrophic failure)",
        "Is the instruction unambiguous and readable: one reasonable interpretation of what to do?",
    ),
    Dimension(
        "instruction_completeness",
        "instruction",
        0.10,
        2,
        "chosen: 2 (a 1 is a catastrophic failure); the name is chosen too (the paper does not name it)",
        "Does the instruction give everything needed: every input and output path, format and constraint?",
    ),
    Dimension(
        "task_value",
        "value",
        0.10,
        None,
        "exempt (T1 §3.2: task training value is the only dimension without a critical minimum)",
        "How much would training on this task teach a terminal agent: realistic, multi-step, not trivial?",
    ),
)
"""The eight dimensions in Fig. 4's facet order; their weights sum to 1 (checked at import)."""

DIMENSION_NAMES: tuple[str, ...] = tuple(d.name for d in DIMENSIONS)
"""The dimension keys, in ``DIMENSIONS`` order."""

HARD_REJECTS: dict[str, str] = {
    "hidden_requirement": "the verifier enforces a requirement the instruction never states",
    "test_leakage": "the agent can read the tests (or the solution) before verification",
    "solution_shortcut": "the reference solution reads or edits the tests or the verifier's outputs",
    "weak_verifier": "the verifier is too weak to validate the goal (a do-nothing agent passes)",
}
"""The four hard rejects of T1 §3.2: any one rejects a task whatever its QualityScore."""

_WEIGHTS = {d.name: d.weight for d in DIMENSIONS}
if not math.isclose(sum(_WEIGHTS.values()), 1.0, abs_tol=1e-12):  # pragma: no cover - a broken table
    raise AssertionError(f"audit weights sum to {sum(_WEIGHTS.values())}, not 1 (T1 Fig. 4)")


def _check_scores(scores: Mapping[str, int]) -> None:
    unknown = sorted(set(scores) - set(_WEIGHTS))
    if unknown:
        raise ValueError(f"unknown audit dimensions {unknown}; the rubric has {list(DIMENSION_NAMES)}")
    bad = {k: v for k, v in scores.items() if isinstance(v, bool) or v not in range(SCORE_MIN, SCORE_MAX + 1)}
    if bad:
        raise ValueError(f"audit scores must be integers {SCORE_MIN}-{SCORE_MAX}; got {bad}")


def weighted_contributions(scores: Mapping[str, int]) -> dict[str, float]:
    """Each scored dimension's weight times its score (the primer's worked example lists them).

    Args:
        scores: dimension name -> score 1-5 (any subset of the eight).

    Returns:
        Dimension name -> weight x score, in ``DIMENSIONS`` order.

    Raises:
        ValueError: an unknown dimension or a score outside 1-5.
    """
    _check_scores(scores)
    return {n: _WEIGHTS[n] * scores[n] for n in DIMENSION_NAMES if n in scores}


def quality_score(scores: Mapping[str, int]) -> float | None:
    """The QualityScore: the weighted sum of the dimension scores, on the 1-5 scale (T1 §3.2, Fig. 4).

    With all eight scored it is ``sum(w_i * s_i)`` (the primer's example gives 3.9). With a subset scored (a
    static audit without the judge scores only some dimensions) it is the weighted mean over the scored
    ones, ``sum(w_i * s_i) / sum(w_i)``, so it stays on the same 1-5 scale; the audit row then says it is
    partial and which weight it covers.

    Args:
        scores: dimension name -> score 1-5.

    Returns:
        The score in [1, 5], or None when no dimension is scored.

    Raises:
        ValueError: an unknown dimension or a score outside 1-5.
    """
    parts = weighted_contributions(scores)
    if not parts:
        return None
    covered = sum(_WEIGHTS[n] for n in parts)
    return sum(parts.values()) / covered


def critical_failures(scores: Mapping[str, int]) -> dict[str, int]:
    """The scored dimensions below their critical minimum (task value is exempt, T1 §3.2).

    Args:
        scores: dimension name -> score 1-5 (unscored dimensions are not checked).

    Returns:
        Dimension name -> its score, for each scored dimension whose score is below ``critical_min``.

    Raises:
        ValueError: an unknown dimension or a score outside 1-5.
    """
    _check_scores(scores)
    return {
        d.name: scores[d.name]
        for d in DIMENSIONS
        if d.name in scores and d.critical_min is not None and scores[d.name] < d.critical_min
    }
