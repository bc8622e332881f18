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

    CTRF's five statuses map onto four: `pending` is reported as `SKIPPED` (the test did not run). A status
    outside CTRF's five makes the report unparsable (`parse_ctrf`), so `OTHER` is only CTRF's own ``other``.
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
        name: Test identifier as reported (pytest node id for CTRF, ``classname::name`` for JUnit). One name
            is one assertion: parametrized cases have distinct names (``test_x[a]``, ``test_x[b]``).
        status: The assertion's outcome.
        message: Failure, skip or error message if the report carries one.
        entries: How many report entries carried this name (1 normally; more when `fold_outcomes` folded
            repeated entries of a malformed report into this one).
    """

    name: str
    status: AssertionStatus
    message: str | None = None
    entries: int = 1


# Which status a repeated name folds to when not every entry passed: the worst one reported.
_FOLD_ORDER = (AssertionStatus.FAILED, AssertionStatus.OTHER, AssertionStatus.SKIPPED, AssertionStatus.PASSED)


def fold_outcomes(outcomes: tuple[AssertionOutcome, ...]) -> tuple[AssertionOutcome, ...]:
    """Fold entries that repeat a test name into one assertion per name (T1 §5.2: P counts assertions).

    A report that lists a name more than once is malformed (a buggy plugin, a re-run appended to the same
    report, two JUnit files covering the same tests, or a tampered verifier): counting every entry would let
    one passing test add 1/S many times over. The folded assertion is `PASSED` only
    if every entry of it passed; otherwise it takes the worst status reported (`FAILED` > `OTHER` >
    `SKIPPED`) and that entry's message. `AssertionOutcome.entries` keeps how many entries were folded.
    Idempotent; distinct names (parametrized cases included) are left alone.

    Args:
        outcomes: Assertions in report order, possibly with repeated names.

    Returns:
        One outcome per distinct name, in order of first appearance.
    """
    groups: dict[str, list[AssertionOutcome]] = {}
    for o in outcomes:
        groups.setdefault(o.name, []).append(o)
    folded: list[AssertionOutcome] = []
    for name, group in groups.items():
        if len(group) == 1:
            folded.append(group[0])
            continue
        status = next(s for s in _FOLD_ORDER if any(o.status is s for o in group))
        message = next((o.message for o in group if o.status is status and o.message), None)
        folded.append(AssertionOutcome(name, status, message, entries=sum(o.entries for o in group)))
    return tuple(folded)


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
        outcomes: Every assertion in report order (possibly empty), one per test name (`read_report` folds
            repeated names with `fold_outcomes`). Kept even when `fallback` is set (e.g. a report written
            before a verifier timeout), for observability; `compute_reward` then ignores them.
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
        """P: the number of distinct assertions (test names) whose every entry has status `PASSED`."""
        return sum(1 for o in fold_outcomes(self.outcomes) if o.status is AssertionStatus.PASSED)

    @property
    def total(self) -> int:
        """T: distinct assertions (test names) reported, skipped and other included (counted, unpassed)."""
        return len(fold_outcomes(self.outcomes))

    @property
    def duplicates(self) -> int:
        """Report entries folded away because they repeated a test name (0 for a well-formed report)."""
        return sum(o.entries for o in self.outcomes) - len(fold_outcomes(self.outcomes))
