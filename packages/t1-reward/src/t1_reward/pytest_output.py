"""Per-case outcomes from pytest's own output, for reports that collapse parametrized cases (T1 §5.2).

pytest-json-ctrf before 0.4 (the 0.3.5 that Terminal-Bench 2 pins) writes one entry for all the cases of a
parametrized test, with one status: a failed entry hides the cases that passed, so P undercounts (an entry
of four cases with one failure counts 0 passed, not 3). pytest itself names every case in what ``test.sh``
printed: the short test summary of ``-rA`` (``PASSED tests/test_x.py::test_y[2]``, ``FAILED ... - why``)
and the verbose lines of ``-v`` (``tests/test_x.py::test_y[2] PASSED  [ 40%]``). `expand_collapsed` reads
those lines and replaces a collapsed entry by its cases when the output accounts for exactly its cases and
agrees with the entry's status; otherwise the entry stays collapsed (the lower bound).

The output is partly the program under test's (a test's captured output is echoed by ``-rA``), so it is
never trusted alone: only the last short test summary section is read when there is one (it is printed
after every captured output), and the report that results is still held to pytest's closing line by
``t1_reward.check_report`` (a forged ``PASSED`` line makes P exceed the closing line's passed count: tamper
evidence).
"""

from __future__ import annotations

import dataclasses
import re

from t1_reward.outcomes import AssertionOutcome, AssertionStatus, Report

__all__ = ["case_outcomes", "expand_collapsed"]

_WORDS = {
    "PASSED": AssertionStatus.PASSED,
    "XPASS": AssertionStatus.PASSED,
    "FAILED": AssertionStatus.FAILED,
    "ERROR": AssertionStatus.FAILED,
    "SKIPPED": AssertionStatus.SKIPPED,
    "XFAIL": AssertionStatus.SKIPPED,
}
_SUMMARY_HEADER = re.compile(r"^=+ short test summary info =+\s*$")
# ``PASSED path::test[id]`` or ``FAILED path::test[id] - message`` (-rA); only parametrized ids are wanted
_SUMMARY_LINE = re.compile(r"^(PASSED|FAILED|ERROR|XPASS|XFAIL) (\S+?::\S+?\[.*?\])(?: - .*)?$")
# ``path::test[id] PASSED  [ 40%]`` (-v)
_VERBOSE_LINE = re.compile(r"^(\S+?::\S+?\[.*?\]) (PASSED|FAILED|ERROR|SKIPPED|XPASS|XFAIL)\b")
_RANK = {AssertionStatus.PASSED: 0, AssertionStatus.SKIPPED: 1, AssertionStatus.FAILED: 2}


def case_outcomes(stdout: str) -> dict[str, AssertionStatus]:
    """Each parametrized case that pytest's output names, with its status.

    Read from the last ``short test summary info`` section when the output has one (``-rA``), else from the
    verbose result lines (``-v``). A case named twice (a test that passed and then errored at teardown)
    keeps its worst status: failed over skipped over passed.

    Args:
        stdout: what ``test.sh`` printed.

    Returns:
        Node id (``tests/test_x.py::test_y[2]``, as pytest printed it) to status; empty when no case line is
        found.
    """
    lines = stdout.splitlines()
    start = max((i for i, line in enumerate(lines) if _SUMMARY_HEADER.match(line.strip())), default=None)
    found: dict[str, AssertionStatus] = {}

    def put(name: str, word: str) -> None:
        status = _WORDS[word]
        if name not in found or _RANK[status] > _RANK[found[name]]:
            found[name] = status

    if start is not None:
        for line in lines[start + 1 :]:
            if match := _SUMMARY_LINE.match(line.rstrip()):
                put(match.group(2), match.group(1))
        return found
    for line in lines:
        if match := _VERBOSE_LINE.match(line.rstrip()):
            put(match.group(1), match.group(2))
    return found


def _cases_of(name: str, cases: dict[str, AssertionStatus]) -> dict[str, AssertionStatus]:
    """The cases of the collapsed entry ``name`` (a node id cut at ``[``), keyed by their ``[id]`` part."""
    mine: dict[str, AssertionStatus] = {}
    for node, status in cases.items():
        base, bracket, rest = node.partition("[")
        # the output's path may be relative to another directory than the report's (``../tests/x.py``)
        if bracket and (base == name or base.endswith("/" + name)):
            mine["[" + rest] = status
    return mine


def expand_collapsed(report: Report, stdout: str | None) -> Report:
    """``report`` with each collapsed parametrized entry replaced by its cases' outcomes from pytest's output.

    An entry (``AssertionOutcome.collapsed``) is expanded only when the output names exactly
    ``entry.cases`` cases of it and they agree with its status (a passed entry: every case passed; a failed
    entry: at least one failed); each case becomes one outcome named ``entry.name`` plus its ``[id]``. Other
    entries, and an entry the output does not account for, are kept as they are.

    Args:
        report: from ``t1_reward.read_report``.
        stdout: what ``test.sh`` printed, or None when not captured.

    Returns:
        ``report`` itself when nothing was expanded, else a copy with the expanded outcomes and a note in
        ``detail``.
    """
    if stdout is None or not report.collapsed:
        return report
    cases = case_outcomes(stdout)
    if not cases:
        return report
    outcomes: list[AssertionOutcome] = []
    expanded = 0
    for o in report.outcomes:
        mine = _cases_of(o.name, cases) if o.collapsed else {}
        statuses = set(mine.values())
        agrees = (o.status is AssertionStatus.PASSED and statuses == {AssertionStatus.PASSED}) or (
            o.status is AssertionStatus.FAILED and AssertionStatus.FAILED in statuses
        )
        if len(mine) != o.cases or not agrees:
            outcomes.append(o)
            continue
        expanded += 1
        outcomes.extend(
            AssertionOutcome(o.name + case, status, o.message if status is AssertionStatus.FAILED else None)
            for case, status in mine.items()
        )
    if not expanded:
        return report
    note = f"{expanded} collapsed parametrized entries read per case from pytest's output"
    detail = f"{report.detail}; {note}" if report.detail else note
    return dataclasses.replace(report, outcomes=tuple(outcomes), detail=detail)
