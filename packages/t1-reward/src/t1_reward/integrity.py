"""Checks that refuse a verifier report the task could not have produced, with the evidence (T1 §10).

The paper leaves verifier integrity as future work (T1 §10: "the verifier executes in the agent-controlled
sandbox with no runtime tamper detection"). The verifier's tests often run the agent's own program, and that
program runs with the verifier's rights, so it can write a report of its own. `check_report` compares what a
`Report` claims with what is known of the task without running anything:

- ``assertion_count``: the report names more distinct assertions than the task has (the count ``t1 tasks
  validate`` observed for the task, else the static count of its ``tests/*.py``); P can then never exceed the
  task's known count;
- ``unknown_test``: the report names tests that no test file of the task defines (pytest node ids and JUnit
  ``classname::name`` are matched against the test functions and methods of ``tests/*.py``);
- ``pytest_summary``: pytest's own closing line in the captured output (``2 failed, 2 passed in 0.31s``)
  disagrees with the report's counts, or pytest started a session (``test session starts``) and never closed
  it while a report exists;
- ``binary_contradicts_report``: ``reward.json`` / ``reward.txt`` says solved while the per-assertion report
  has failed assertions, or, for a run whose per-assertion report is missing or unparsable, while pytest's
  closing line counts failed tests or errors (and a reward file above 0 in place of a missing report
  after a pytest session that never closed is ``pytest_summary`` evidence);
- ``pytest_summary_cut``: the report would be scored (a per-assertion report, or a reward file above 0 in
  its place), pytest's closing line is missing from the captured output because the output was cut there
  (a ``[... N bytes omitted`` marker after which no closing line comes), and the report is pytest's (a
  ``ctrf.json``, or a test session in the output). A cut never silently turns the closing-line check off:
  the report is not trusted alone. ``t1_reward.judge`` scores it 0, as the agent's doing, never dropped
  (`UNVERIFIABLE_CHECKS`): ``t1_rollout.verify`` keeps the head and the tail of what ``test.sh`` printed,
  so pytest's closing line survives any volume printed before it; only more output than the kept tail
  printed after pytest closed (or a forged marker) hides it, and a dropped trial would let the agent pick
  which of its failures leave the batch.

What stays open: a program under test that writes a report with exactly the task's test names, no more of
them than the task has, while pytest's closing line is absent from the captured output without a cut (a
``test.sh`` that hides pytest's output) or forged on pytest's own output stream, is not detectable from the
report alone.
The sandbox-side checks (tests read-only and hashed, the report re-read after every process is killed) live
in ``t1_rollout.verify``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass

from t1_reward.outcomes import AssertionOutcome, AssertionStatus, FallbackCause, Report

__all__ = [
    "NOT_REPORTED",
    "UNVERIFIABLE_CHECKS",
    "PytestSummary",
    "TamperEvidence",
    "check_report",
    "missing_as_failed",
    "parse_pytest_summary",
    "summary_cut",
]

#: Name prefix of the failed outcomes `missing_as_failed` adds for assertions a report left out.
NOT_REPORTED = "t1::not-reported"

#: How many offending names a piece of evidence keeps (the rest are counted in its detail).
MAX_NAMES = 20

#: Checks that say the report cannot be verified rather than that it was forged: scored 0 all the same,
#: with their own kind (``unverifiable``) in ``t1_reward.judge``.
UNVERIFIABLE_CHECKS = frozenset({"pytest_summary_cut"})


@dataclass(frozen=True)
class TamperEvidence:
    """One reason to refuse a verifier report or a verifier run.

    Attributes:
        check: which check failed: ``assertion_count``, ``unknown_test``, ``pytest_summary``,
            ``binary_contradicts_report`` (the report checks here), or ``report_changed``,
            ``tests_changed`` (the sandbox-side checks of ``t1_rollout.verify``).
        detail: one sentence saying what was found.
        claimed: the count the report claims (assertions, or passed assertions), when the check compares
            counts.
        known: the count it was compared with (the task's known assertions, pytest's own figure).
        names: up to `MAX_NAMES` offending test or file names.
    """

    check: str
    detail: str
    claimed: int | None = None
    known: int | None = None
    names: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        """The evidence as JSON-ready data (for the trial's record)."""
        return {
            "check": self.check,
            "detail": self.detail,
            "claimed": self.claimed,
            "known": self.known,
            "names": list(self.names),
        }


@dataclass(frozen=True)
class PytestSummary:
    """pytest's closing line, as counts (``=== 2 failed, 3 passed, 1 error in 0.50s ===``).

    Attributes:
        counts: outcome word (``passed``, ``failed``, ``error``, ``skipped``, ``xfailed``, ``xpassed``,
            ``deselected``, ``warnings``, ...) to its number; plural forms are folded (``errors`` is
            ``error``).
    """

    counts: dict[str, int]

    def get(self, word: str) -> int:
        """The number given for ``word`` (0 when the line does not name it)."""
        return self.counts.get(word, 0)

    @property
    def passed(self) -> int:
        """Tests that passed, an unexpected pass (``xpassed``) included: what CTRF reports as passed."""
        return self.get("passed") + self.get("xpassed")

    @property
    def tests_low(self) -> int:
        """Fewest distinct tests the line can stand for (each test has one of these outcomes)."""
        return sum(self.get(w) for w in ("passed", "failed", "skipped", "xfailed", "xpassed"))

    @property
    def tests_high(self) -> int:
        """Most distinct tests the line can stand for (an ``error`` may be a test of its own, at setup)."""
        return self.tests_low + self.get("error")


_OUTCOME = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?|rerun)\b")
# The closing line: outcomes, then " in 1.23s" (pytest >= 6 may add "(0:00:01)"), optionally in "=" rules.
_CLOSING = re.compile(r"^=*\s*((?:\d+ \w+,? ?)+) in \d+(?:\.\d+)?s\b.*?=*\s*$")
_NO_TESTS = re.compile(r"^=*\s*no tests ran\b.*$")
_SESSION_START = re.compile(r"^=+ test session starts =+\s*$")
# A cut in the captured output (the sandbox's per-stream cap, the verifier's head-and-tail cap).
_CUT = re.compile(r"^\[\.\.\. \d+ bytes omitted")


def parse_pytest_summary(stdout: str) -> tuple[PytestSummary | None, bool]:
    """Find pytest's closing line in captured output: the last one after the last session start.

    pytest prints its closing line last, after every captured output it echoes (``-rA`` shows what the
    tests printed), so only the last closing line counts: a line printed by the program under test earlier
    in the output is not taken for pytest's.

    Args:
        stdout: what ``test.sh`` printed (stdout then stderr, as ``t1_rollout.verify`` captures it).

    Returns:
        ``(summary, unfinished)``: the counts of the last closing line (None when there is none), and whether
        the last ``test session starts`` header has no closing line after it (pytest did not finish). A cut
        in the output (a ``[... N bytes omitted`` marker) after the last closing line makes both unknown:
        ``(None, False)``.
    """
    summary: PytestSummary | None = None
    started = False
    for raw in stdout.splitlines():
        line = raw.strip()
        if _SESSION_START.match(line):
            started, summary = True, None
            continue
        if _CUT.match(line):  # what followed the cut is unknown until a closing line shows up again
            started, summary = False, None
            continue
        if _NO_TESTS.match(line):
            started, summary = False, PytestSummary({})
            continue
        counts = _closing_counts(line)
        if counts:
            started, summary = False, PytestSummary(counts)
    return summary, started


def summary_cut(stdout: str) -> str | None:
    """The cut marker that hides pytest's closing line, or None when no cut comes after the last one.

    Args:
        stdout: what ``test.sh`` printed, as T1 captured it.

    Returns:
        The last ``[... N bytes omitted ...]`` line when no pytest closing line (nor ``no tests ran``)
        follows it; None when the output has no cut, or a closing line comes after the last cut.
    """
    cut: str | None = None
    for raw in stdout.splitlines():
        line = raw.strip()
        if _CUT.match(line):
            cut = line
        elif cut is not None and (_NO_TESTS.match(line) or _closing_counts(line)):
            cut = None
    return cut


def _closing_counts(line: str) -> dict[str, int]:
    match = _CLOSING.match(line)
    counts: dict[str, int] = {}
    if match is None:
        return counts
    for number, word in _OUTCOME.findall(match.group(1)):
        word = {"errors": "error", "warning": "warnings"}.get(word, word)
        counts[word] = counts.get(word, 0) + int(number)
    return counts


def _split_name(name: str) -> tuple[str, tuple[str, ...]] | None:
    """``(file path, qualified name parts)`` of a pytest node id or JUnit ``classname::name``, params cut."""
    base = name.split("[", 1)[0]
    parts = base.split("::")
    if len(parts) < 2 or not all(parts):
        return None
    head, rest = parts[0], tuple(parts[1:])
    if head.endswith(".py"):  # pytest node id: path/to/test_x.py::Class::test
        return head.replace("\\", "/"), rest
    # JUnit: a dotted module path, then the classes (``tests.test_x.TestY::test_z``)
    dotted = head.split(".")
    return "/".join(dotted), rest  # matched by module prefix in `_defined`


def _defined(name: str, known_tests: Mapping[str, frozenset[str]]) -> bool:
    """Whether the reported ``name`` is a test that one of the task's test files defines."""
    split = _split_name(name)
    if split is None:
        return False
    path, rest = split
    for rel, qualnames in known_tests.items():
        module = rel.removesuffix(".py")
        rel_parts, path_parts = module.split("/"), path.removesuffix(".py").split("/")
        if path.endswith(".py"):
            # node id: its path ends with the file's path relative to tests/ (rootdir may be above it)
            if path_parts[-len(rel_parts) :] == rel_parts and "::".join(rest) in qualnames:
                return True
            continue
        # JUnit: classname = module path (a suffix of it) + classes
        for cut in range(len(path_parts), 0, -1):
            if path_parts[:cut][-len(rel_parts) :] == rel_parts:
                qual = "::".join((*path_parts[cut:], *rest))
                if qual in qualnames:
                    return True
    return False


def missing_as_failed(report: Report, observed_assertions: int | None) -> Report:
    """``report`` with every assertion it left out counted as failed, against the task's observed count.

    A program under test that deletes its failing entries from the report leaves P as it was but makes T
    smaller and the derived binary outcome "solved": the ratio reward (c P/T) and the binary reward would pay
    for the deletion. Held to the count the task's own verifier reported for the reference solution (``t1
    tasks validate``'s record), the missing assertions are failed outcomes named ``t1::not-reported-<i>``,
    so T is the task's and b is 0 (T1 §5.2). A collection error that hid tests from an honest run scores the
    same way: those tests did not pass. The static count is not used here: it is an upper bound (a test
    under ``if`` counts), and padding with it could fail an honest, solved run.

    Args:
        report: from ``t1_reward.read_report``.
        observed_assertions: the validation record's observed count for the task, or None.

    Returns:
        ``report`` itself when it falls back, the count is unknown, or nothing is missing; else a copy with
        the missing outcomes appended and a note in ``detail``.
    """
    if report.fallback is not None or observed_assertions is None or report.total >= observed_assertions:
        return report
    missing = observed_assertions - report.total
    added = tuple(
        AssertionOutcome(
            f"{NOT_REPORTED}-{i + 1}",
            AssertionStatus.FAILED,
            f"the task's verifier reported {observed_assertions} assertions at validation; this run's report "
            f"has {report.total}",
        )
        for i in range(missing)
    )
    note = f"{missing} assertions missing from the report count as failed (validated: {observed_assertions})"
    detail = f"{report.detail}; {note}" if report.detail else note
    return dataclasses.replace(report, outcomes=report.outcomes + added, detail=detail)


def check_report(
    report: Report,
    *,
    known_assertions: int | None = None,
    known_tests: Mapping[str, frozenset[str]] | None = None,
    stdout: str | None = None,
) -> tuple[TamperEvidence, ...]:
    """Every reason to refuse ``report`` as the task's own verdict (empty: nothing found).

    Pure: it reads only its arguments. Checks whose input is None are skipped (the module docstring lists
    them). Only a report whose outcomes are to be scored (``report.fallback`` None) is checked against the
    counts and names; a report that falls back is not scored from its outcomes anyway, but a reward file
    above 0 standing in for a missing or unparsable report is held to pytest's closing line (a cut that
    hides it, failures it counts).

    Args:
        report: from ``t1_reward.read_report``.
        known_assertions: the task's assertion count: the count ``t1 tasks validate`` recorded for it
            (the oracle's report), else the static count of its ``tests/*.py`` (``t1_tasks``); None when
            neither is known.
        known_tests: relative path of each test file under ``tests/`` to the qualified names of the tests it
            defines (``test_x``, ``TestY::test_z``; ``t1_tasks.defined_tests``); None when not known.
        stdout: what ``test.sh`` printed, for pytest's closing line; None when not captured.

    Returns:
        The evidence, in the order of the checks above.
    """
    evidence: list[TamperEvidence] = []
    scored = report.fallback is None
    if scored and known_assertions is not None and report.total > known_assertions:
        evidence.append(
            TamperEvidence(
                "assertion_count",
                f"the report names {report.total} distinct assertions but the task has {known_assertions}",
                claimed=report.total,
                known=known_assertions,
            )
        )
    if scored and known_tests:
        unknown = [o.name for o in report.outcomes if not _defined(o.name, known_tests)]
        if unknown:
            more = f" (and {len(unknown) - MAX_NAMES} more)" if len(unknown) > MAX_NAMES else ""
            evidence.append(
                TamperEvidence(
                    "unknown_test",
                    f"{len(unknown)} reported tests are defined in no test file of the task{more}: "
                    f"{', '.join(unknown[:3])}",
                    claimed=len(unknown),
                    known=0,
                    names=tuple(unknown[:MAX_NAMES]),
                )
            )
    if stdout is not None and report.outcomes:
        summary, unfinished = parse_pytest_summary(stdout)
        if unfinished and report.source == "ctrf":
            evidence.append(
                TamperEvidence(
                    "pytest_summary",
                    "pytest started a test session and never printed its closing line, yet a ctrf.json "
                    "report exists (pytest writes it when the session ends)",
                )
            )
        elif summary is not None and scored and summary.counts:
            if report.passed > summary.passed:
                evidence.append(
                    TamperEvidence(
                        "pytest_summary",
                        f"the report has {report.passed} passed assertions but pytest's closing line says "
                        f"{summary.passed} passed",
                        claimed=report.passed,
                        known=summary.passed,
                    )
                )
            elif not summary.tests_low <= report.total <= summary.tests_high:
                evidence.append(
                    TamperEvidence(
                        "pytest_summary",
                        f"the report has {report.total} assertions but pytest's closing line stands for "
                        f"{summary.tests_low}"
                        + (f" to {summary.tests_high}" if summary.tests_high > summary.tests_low else ""),
                        claimed=report.total,
                        known=summary.tests_low,
                    )
                )
    # a binary outcome above 0 standing in for a missing or unparsable per-assertion report would be paid
    paid_binary = (
        report.fallback in (FallbackCause.MISSING, FallbackCause.UNPARSABLE)
        and report.binary is not None
        and report.binary > 0
    )
    if stdout is not None and ((scored and report.outcomes) or paid_binary):
        cut = summary_cut(stdout)
        pytests = report.source == "ctrf" or any(_SESSION_START.match(x.strip()) for x in stdout.splitlines())
        if cut is not None and pytests:
            evidence.append(
                TamperEvidence(
                    "pytest_summary_cut",
                    f"pytest's closing line is missing from the captured output: it was cut ({cut[:120]}) "
                    "and no closing line follows, so the report cannot be checked against pytest's own "
                    "counts and is not trusted alone",
                )
            )
        elif paid_binary and report.binary is not None:
            summary, unfinished = parse_pytest_summary(stdout)
            if unfinished:
                evidence.append(
                    TamperEvidence(
                        "pytest_summary",
                        f"pytest started a test session and never printed its closing line, yet the reward "
                        f"file says {report.binary:g} in place of the missing per-assertion report",
                    )
                )
            elif report.binary >= 1 and summary is not None and summary.get("failed") + summary.get("error"):
                evidence.append(
                    TamperEvidence(
                        "binary_contradicts_report",
                        f"the reward file says {report.binary:g} (solved) but pytest's closing line counts "
                        f"{summary.get('failed')} failed and {summary.get('error')} errors",
                        known=summary.get("failed") + summary.get("error"),
                    )
                )
    if scored and report.binary is not None and report.binary > 0:  # the names are listed only then
        failed = [
            o.name for o in report.outcomes if o.status in (AssertionStatus.FAILED, AssertionStatus.OTHER)
        ]
        if failed:
            evidence.append(
                TamperEvidence(
                    "binary_contradicts_report",
                    f"the reward file says {report.binary:g} (solved) but {len(failed)} assertions failed",
                    claimed=None,
                    known=len(failed),
                    names=tuple(failed[:MAX_NAMES]),
                )
            )
    return tuple(evidence)
