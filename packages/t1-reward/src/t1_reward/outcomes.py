"""Per-assertion outcomes and the verifier report they form (T1 §5.2)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property


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
    last: dict[str, AssertionOutcome] = {}
    for o in outcomes:
        last[o.name] = o  # a dict keeps a key at its first insertion: order of first appearance
    if len(last) == len(outcomes):
        return tuple(outcomes)  # no name repeats (the usual report): the same outcomes, nothing rebuilt
    entries: dict[str, int] = dict.fromkeys(last, 0)
    for o in outcomes:
        entries[o.name] += o.entries
    return tuple(
        o
        if entries[name] == o.entries
        else AssertionOutcome(name, o.status, o.message, entries[name], o.cases)
        for name, o in last.items()
    )


@dataclass(frozen=True)
class Counts:
    """What the reward and its metrics read off a report's outcomes, counted in one pass (T1 §5.2, Eq. 20).

    Attributes:
        passed: P, assertions passed: the cases of every distinct name whose final entry passed.
        total: T, assertions reported: the cases of every distinct name (skipped and other included).
        duplicates: report entries folded away because they repeated a name.
        collapsed: distinct names whose final entry stands for several parametrized cases.
    """

    passed: int
    total: int
    duplicates: int
    collapsed: int


def count_outcomes(outcomes: tuple[AssertionOutcome, ...]) -> Counts:
    """Count ``outcomes`` as `fold_outcomes` would fold them, without building the folded tuple.

    Each distinct name counts once, at its last entry's status and case count (`fold_outcomes`), so the
    counts of a folded and an unfolded tuple of the same entries are equal.

    Args:
        outcomes: Assertions in report order, possibly with repeated names.

    Returns:
        The `Counts`.
    """
    last: dict[str, AssertionOutcome] = {}
    entries = 0
    for o in outcomes:
        last[o.name] = o
        entries += o.entries
    passed = total = collapsed = 0
    for o in last.values():
        cases = o.cases
        total += cases
        if o.status is AssertionStatus.PASSED:
            passed += cases
        if cases > 1:
            collapsed += 1
    return Counts(passed, total, entries - len(last), collapsed)


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

    @cached_property
    def counts(self) -> Counts:
        """P, T and the other counts, taken in one pass over `outcomes` and kept (`count_outcomes`)."""
        return count_outcomes(self.outcomes)

    @property
    def passed(self) -> int:
        """P: assertions passed: the cases of every distinct test name whose final entry passed."""
        return self.counts.passed

    @property
    def total(self) -> int:
        """T: assertions reported (the cases of every distinct test name; skipped and other included)."""
        return self.counts.total

    @property
    def duplicates(self) -> int:
        """Report entries folded away because they repeated a test name (reruns; 0 for a single run)."""
        return self.counts.duplicates

    @property
    def collapsed(self) -> int:
        """Entries that stand for several parametrized cases (pytest-json-ctrf < 0.4); 0 otherwise."""
        return self.counts.collapsed
