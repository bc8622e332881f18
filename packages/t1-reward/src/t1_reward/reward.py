"""Scalar reward from a verifier report: dense P/S, the ratio variant, or binary (T1 §5.2)."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

from t1_reward.outcomes import AssertionStatus, FallbackCause, Report
from t1_spec import BinaryRewardSpec, DenseRewardSpec, RatioRewardSpec, RewardSpec

#: The paper's ratio-variant coefficient (T1 §5.2: r = max(b, 0.4 P/T)), read from its one home,
#: `t1_spec.RatioRewardSpec.coefficient`.
RATIO_COEFFICIENT: float = RatioRewardSpec.model_fields["coefficient"].default


@dataclass(frozen=True)
class RewardResult:
    """The scalar reward of one trial and how it was obtained.

    Attributes:
        value: The reward r. None means no outcome is available at all (no usable per-assertion report and no
            binary outcome): the trial is an infrastructure failure, never the agent's 0; the caller records
            it as failed with `fallback` as the cause.
        passed: P, assertions passed in the report (0 when there is none).
        total: T, assertions reported (skipped included).
        binary: The binary outcome b the report carried, or None.
        fallback: Why the per-assertion outcomes were not used, or None.
        kind: The formula actually applied: ``"dense"``, ``"ratio"``, ``"binary"``, ``"binary_fallback"`` (the
            per-assertion report was not usable and b was used instead) or ``"none"`` (value is None).
        duplicates: Report entries folded away because they repeated a test name (`Report.duplicates`); P and
            T count each name once. Non-zero means the verifier's report was malformed.
    """

    value: float | None
    passed: int
    total: int
    binary: float | None
    fallback: FallbackCause | None
    kind: str
    duplicates: int = 0


def _count(value: Any, name: str, *, positive: bool = False) -> int:
    """``value`` as a non-negative (or positive) integer count; integral floats such as 20.0 are accepted.

    Raises:
        ValueError: a bool, a non-number, NaN/inf, a non-integer, or a value below the bound; the message
            names the argument.
    """
    bound = "a positive integer" if positive else "a non-negative integer"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be {bound} (a count), got {value!r} of type {type(value).__name__}")
    if isinstance(value, numbers.Integral):
        count = int(value)
    else:
        as_float = float(value)
        if not (math.isfinite(as_float) and as_float.is_integer()):
            raise ValueError(f"{name} must be {bound} (a count), got {value!r}")
        count = int(as_float)
    if count < (1 if positive else 0):
        raise ValueError(f"{name} must be {bound} (a count), got {value!r}")
    return count


def _finite(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def dense_reward(passed: int, scale: int) -> float:
    """Dense reward r = P / S: the absolute passing count on a fixed global scale (T1 §5.2, Eq. 20).

    Not clamped: a task with more than S passing assertions scores above 1 (S = 20 sits near the 90th
    percentile of assertion counts; the maximum is about 35).

    Args:
        passed: P, the number of passing assertions: an integer >= 0 (an integral float such as 3.0 is
            accepted).
        scale: S, the global scale in assertions: an integer >= 1 (the paper uses 20; 20.0 is accepted).

    Returns:
        P / S (dimensionless; 1/S per passing assertion).

    Raises:
        ValueError: ``passed`` is not a non-negative integer, or ``scale`` is not a positive integer (bools,
            non-integers such as 2.5, NaN and inf included); the message names the argument.
    """
    p = _count(passed, "passed (P)")
    s = _count(scale, "scale (S)", positive=True)
    return p / s


def ratio_reward(passed: int, total: int, binary: float, coefficient: float = RATIO_COEFFICIENT) -> float:
    """The earlier ratio variant r = max(b, c P/T) clamped to [0, max(1, b)], kept for comparison (T1 §5.2).

    Args:
        passed: P, passing assertions: an integer with 0 <= P <= T.
        total: T, all assertions reported: an integer >= 0; with T = 0 the ratio term is 0 and r = clamp(b).
        binary: b, the terminal outcome (any finite number; 1.0 solved, 0.0 not).
        coefficient: c in [0, 1], the weight of the pass ratio; 0.4 in the paper. Above 1 a partly solved
            task could tie a solved one, below 0 failing assertions would push r down: both refused.

    Returns:
        The clamped reward.

    Raises:
        ValueError: P or T not a non-negative integer, P > T, b not finite, or c not a finite number in
            [0, 1]; the message names the argument.
    """
    p = _count(passed, "passed (P)")
    t = _count(total, "total (T)")
    if p > t:
        raise ValueError(f"need passed (P) <= total (T), got passed={passed}, total={total}")
    b = _finite(binary, "binary (b)")
    c = _finite(coefficient, "coefficient (c)")
    if not 0.0 <= c <= 1.0:
        raise ValueError(f"coefficient (c) must be in [0, 1] (the paper uses 0.4), got {coefficient!r}")
    ratio = c * p / t if t else 0.0
    return min(max(max(b, ratio), 0.0), max(1.0, b))


def _derived_binary(report: Report) -> float:
    # As Harbor's template does (pytest exit code): solved iff nothing failed and something passed.
    failed = any(o.status in (AssertionStatus.FAILED, AssertionStatus.OTHER) for o in report.outcomes)
    return 1.0 if report.passed > 0 and not failed else 0.0


def compute_reward(report: Report, spec: RewardSpec) -> RewardResult:
    """Turn a verifier `Report` into the trial's scalar reward under a reward spec (T1 §5.2, Algorithm 5.2).

    With a usable per-assertion report: `DenseRewardSpec` gives P / S (Eq. 20); `RatioRewardSpec` gives
    max(b, c P/T) clamped; `BinaryRewardSpec` gives b. When b is needed but the reward file is absent, b is
    derived from the outcomes (1 if at least one passed and none failed, as a pytest exit code would say).
    Without a usable per-assertion report (``report.fallback`` set) every kind falls back to b, so a solved
    task never scores 0; without b either, or when the verifier crashed and b is 0 (a crashed grader graded
    nothing), the value is None: the report holds no outcome. How a trial is scored then (dropped for an
    infrastructure failure, 0 for a failure the agent caused, 0 for a tampered report) is decided in one
    place, `t1_reward.judge`, which calls this function.

    P and T count assertions (`Report.passed`, `Report.total`): a name reported several times (reruns)
    counts once, at its last entry's status, and an entry of pytest-json-ctrf < 0.4 that collapsed a
    parametrized test counts its cases; ``duplicates`` in the result says how many entries were folded.

    Args:
        report: From `read_report`.
        spec: The recipe's reward section: a `t1_spec` `DenseRewardSpec` (``scale`` S), `RatioRewardSpec`
            (``coefficient`` c) or `BinaryRewardSpec`; the spec holds every default.

    Returns:
        The `RewardResult`.

    Raises:
        ValueError: ``spec`` is not one of the three reward specs (a programmer error), or a hand-built
            ``report.binary`` outside [0, 1] (`read_report` never yields one: such a reward file is
            unparsable).
    """
    if not isinstance(spec, DenseRewardSpec | RatioRewardSpec | BinaryRewardSpec):
        raise ValueError(
            f"unknown reward kind: a {type(spec).__name__} is not a t1_spec DenseRewardSpec, RatioRewardSpec "
            "or BinaryRewardSpec (reward.kind: dense | ratio | binary)"
        )
    if report.binary is not None and not 0.0 <= report.binary <= 1.0:
        b = report.binary
        raise ValueError(f"report.binary (b) must lie in [0, 1], got {b!r} (read_report refuses it)")
    passed, total = report.passed, report.total

    def result(value: float | None, used: str) -> RewardResult:
        return RewardResult(value, passed, total, report.binary, report.fallback, used, report.duplicates)

    if report.fallback is not None:
        if report.binary is None:
            return result(None, "none")
        if report.fallback is FallbackCause.VERIFIER_CRASH and report.binary <= 0:
            # A verifier that crashed (killed by a signal, or could not run) graded nothing: a 0 written on
            # its way down is not the agent's 0. A positive outcome is kept: a solved task never scores 0.
            return result(None, "none")
        return result(report.binary, "binary_fallback")
    if isinstance(spec, DenseRewardSpec):
        return result(dense_reward(passed, spec.scale), "dense")
    binary = report.binary if report.binary is not None else _derived_binary(report)
    if isinstance(spec, RatioRewardSpec):
        return result(ratio_reward(passed, total, binary, spec.coefficient), "ratio")
    return result(binary, "binary")
