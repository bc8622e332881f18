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
            repeated entries into this one: reruns, or a malformed report).
        cases: How many assertions this entry stands for: 1, except for an entry of pytest-json-ctrf < 0.4
            (the 0.3.5 that Terminal-Bench 2 pins), which collapses the cases of a parametrized test into
            one entry with ``retries`` = cases - 1 (`t1_reward.parse_ctrf`). Such an entry keeps one status
            for all its cases (the first failing or skipped case's, else passed), so its cases count as
            passed only when it passed.
    """

    name: str
    status: AssertionStatus
    message: str | None = None
    entries: int = 1
    cases: int = 1

    @property
    def collapsed(self) -> bool:
        """The entry stands for several parametrized cases (pytest-json-ctrf < 0.4 collapsed them)."""
        return self.cases > 1


def fold_outcomes(outcomes: tuple[AssertionOutcome, ...]) -> tuple[AssertionOutcome, ...]:
    """Fold entries that repeat a test name into one assertion per name, at its final status (T1 §5.2).

    A test that pytest-rerunfailures ran again is reported once per attempt in JUnit XML (an empty
    ``<testcase>`` for each rerun attempt, then the final one; pytest-rerunfailures 16.6.1), and a rerun
    appended to the same report repeats the name too: pytest, CTRF (``retries``, ``flaky``) and the rerun
    plugins all count such a test once, at the status of its final attempt, so the folded assertion takes
    the status, message and case count of the name's last entry in report order. Counting every entry
    instead would let one passing test add 1/S many times over, so a name counts once whatever its number
    of entries. `AssertionOutcome.entries` keeps how many entries were folded. Idempotent; distinct names
    (parametrized cases included) are left alone.

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
        final = group[-1]
        entries = sum(o.entries for o in group)
        folded.append(AssertionOutcome(name, final.status, final.message, entries=entries, cases=final.cases))
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
        """P: assertions passed: the cases of every distinct test name whose final entry passed."""
        return sum(o.cases for o in fold_outcomes(self.outcomes) if o.status is AssertionStatus.PASSED)

    @property
    def total(self) -> int:
        """T: assertions reported (the cases of every distinct test name; skipped and other included)."""
        return sum(o.cases for o in fold_outcomes(self.outcomes))

    @property
    def duplicates(self) -> int:
        """Report entries folded away because they repeated a test name (reruns; 0 for a single run)."""
        return sum(o.entries for o in self.outcomes) - len(fold_outcomes(self.outcomes))

    @property
    def collapsed(self) -> int:
        """Entries that stand for several parametrized cases (pytest-json-ctrf < 0.4); 0 otherwise."""
        return sum(1 for o in fold_outcomes(self.outcomes) if o.collapsed)
