"""Per-assertion outcomes and the verifier report they form (T1 §5.2)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class VerifierReportError(ValueError):
    """A verifier output file could not be parsed.

    Raised by the strict parsers (`parse_ctrf`, `parse_junit`, `parse_reward_json`, `parse_reward_txt`).
    `read_report` catches it and turns it into a `Report` tagged `FallbackCause.UNPARSABLE`, because bad
    verifier output is data about the trial, not a crash of the trainer.
    """


class AssertionStatus(StrEnum):
    """Outcome of one assertion (one test case).

    CTRF's five statuses map onto four: `pending` is reported as `SKIPPED` (the test did not run).
    Only `PASSED` counts towards P; every status counts towards T (see `Report.total`).
    """

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    OTHER = "other"


@dataclass(frozen=True)
class AssertionOutcome:
    """One assertion as the verifier reported it.

    Attributes:
        name: Test identifier as reported (pytest node id for CTRF, ``classname::name`` for JUnit).
        status: The assertion's outcome.
        message: Failure, skip or error message if the report carries one; for an unknown raw status the raw
            status is kept here so nothing is lost.
    """

    name: str
    status: AssertionStatus
    message: str | None = None


class FallbackCause(StrEnum):
    """Why the reward falls back from the per-assertion report to the binary outcome (T1 §5.2, Fallback)."""

    MISSING = "missing"
    UNPARSABLE = "unparsable"
    VERIFIER_TIMEOUT = "verifier_timeout"
    VERIFIER_CRASH = "verifier_crash"


@dataclass(frozen=True)
class Report:
    """What one verifier run reported: per-assertion outcomes plus the binary terminal outcome.

    Attributes:
        outcomes: Every assertion in report order (possibly empty). Kept even when `fallback` is set
            (e.g. a report written before a verifier timeout), for observability; `compute_reward` then
            ignores them.
        binary: The terminal outcome b from ``reward.json`` (key ``"reward"``) or ``reward.txt``; None when
            neither file gives a usable number.
        source: Where the outcomes came from: ``"ctrf"``, ``"junit"``, or, when no per-assertion report was
            usable, where the binary came from (``"reward.json"``, ``"reward.txt"``) or ``"none"``.
        fallback: Why the per-assertion outcomes are not to be used; None when they are.
        detail: Human-readable notes on every problem met while reading (file, what was wrong), or None.
    """

    outcomes: tuple[AssertionOutcome, ...]
    binary: float | None
    source: str
    fallback: FallbackCause | None
    detail: str | None = None

    @property
    def passed(self) -> int:
        """P: the number of assertions with status `PASSED`."""
        return sum(1 for o in self.outcomes if o.status is AssertionStatus.PASSED)

    @property
    def total(self) -> int:
        """T: all assertions reported, skipped and other included (a skipped check counts, unpassed)."""
        return len(self.outcomes)
