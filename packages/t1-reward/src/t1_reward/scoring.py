"""One scoring rule for a verifier's output folder: training, ``t1 eval`` and ``t1 reward`` call it (T1 §5.2).

`score_output` reads the folder (`read_report`, with what ``test.sh`` printed), checks the report
(`check_report`), counts the assertions it left out as failed (`missing_as_failed`) and scores it by the one
policy, `judge`. What it knows of the task comes in `TaskFacts`; the facts of the run (timeout, signal,
infrastructure failure, the run's own evidence, the environment's blame) come as arguments. A caller with
fewer facts (``t1 reward`` on a folder) gets the same score whenever the facts it lacks do not decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from t1_reward.integrity import (
    TamperEvidence,
    check_report,
    missing_as_failed,
    parse_pytest_summary,
)
from t1_reward.no_run import no_run_cause
from t1_reward.outcomes import FallbackCause, Report
from t1_reward.report import captured_output, read_report
from t1_reward.verdict import Verdict, judge
from t1_spec import RewardSpec

__all__ = ["TaskFacts", "pytest_ran", "score_output"]

_SESSION = "test session starts"


@dataclass(frozen=True)
class TaskFacts:
    """What is known of the task, apart from the run; every field may be unknown.

    Attributes:
        known_assertions: the task's assertion count (the validation record's observed count, else the
            static count of its ``tests/*.py``); None when unknown.
        observed_assertions: the validation record's observed count, for `missing_as_failed`; None when
            there is no record.
        known_tests: test file under ``tests/`` to the qualified names it defines (``t1_tasks.
            defined_tests``); None when unknown.
        expects_per_assertion: the task's verifier writes a per-assertion report (its validation record,
            or its ``test.sh`` asking pytest for one); None: inferred from the folder (a per-assertion file
            that is present but unusable says so).
        verifier_proven: the validation record shows the task's verifier writing a per-assertion report
            on this machine under the run's network policy, so a verifier that wrote nothing was kept from
            it by the run (the agent), not by the environment.
        test_dependencies: top-level modules that the task's ``test.sh`` installs for its tests
            (``t1_tasks.verifier_needs``); empty when unknown.
    """

    known_assertions: int | None = None
    observed_assertions: int | None = None
    known_tests: Mapping[str, frozenset[str]] | None = None
    expects_per_assertion: bool | None = None
    verifier_proven: bool = False
    test_dependencies: frozenset[str] = frozenset()


def pytest_ran(stdout: str | None) -> bool:
    """Whether the captured output shows a pytest session (its header or its closing line)."""
    if not stdout:
        return False
    return _SESSION in stdout or parse_pytest_summary(stdout)[0] is not None


def score_output(
    out_dir: Path,
    spec: RewardSpec,
    *,
    facts: TaskFacts = TaskFacts(),
    stdout: str | None = None,
    timed_out: bool = False,
    crashed: bool = False,
    infrastructure_error: str | None = None,
    run_evidence: tuple[TamperEvidence, ...] = (),
    sabotage: str | None = None,
    environment_cause: str | None = None,
) -> tuple[Report, Verdict]:
    """Read, check and score a verifier's output folder by `t1_reward.judge` (the module docstring).

    A task that asks pytest for a per-assertion report and whose verifier ran no test through no fault of
    the agent (it did not start, or a dependency ``test.sh`` installs was missing before any test ran:
    `t1_reward.no_run`) is dropped with that cause, whatever reward file the script wrote. A verifier that
    exited on its own and left no report file at all, with no pytest session in what it
    printed, wrote nothing: that is `judge`'s ``silent`` (dropped, never the agent's 0), unless
    ``facts.verifier_proven`` (then the run kept it from writing: the agent's 0) or T1 could not collect
    the output from a healthy sandbox (``sabotage``: the agent's 0).

    Args:
        out_dir: the folder (``ctrf.json``, JUnit ``*.xml``, ``reward.json``, ``reward.txt``,
            ``test-stdout.txt``).
        spec: the recipe's reward section.
        facts: what is known of the task.
        stdout: what ``test.sh`` printed; None reads ``out_dir / "test-stdout.txt"`` when it exists.
        timed_out: the verifier ran past its deadline.
        crashed: ``test.sh`` was ended by a signal, or a T1-side call failed.
        infrastructure_error: why a T1-side call failed (dropped), or None.
        run_evidence: tamper evidence found in the sandbox (``t1_rollout.verify``).
        sabotage: why T1 could not collect the output from a sandbox that stayed healthy, or None.
        environment_cause: why T1's own facts blame the environment (``t1_rollout.attribution``), or None.

    Returns:
        ``(report, verdict)``: the report as scored (assertions it left out added as failed when the
        validated count is known).

    Raises:
        ValueError: as `judge` (an unknown reward spec).
    """
    if stdout is None:
        stdout = captured_output(out_dir)
    report = read_report(out_dir, timed_out=timed_out, crashed=crashed, stdout=stdout)
    evidence = tuple(run_evidence)
    if infrastructure_error is None:
        evidence += check_report(
            report, known_assertions=facts.known_assertions, known_tests=facts.known_tests, stdout=stdout
        )
        # assertions the report left out count as failed (deleting failing entries must not pay)
        padded = missing_as_failed(report, facts.observed_assertions)
        if padded is not report:
            report = padded
            if not any(e.check == "binary_contradicts_report" for e in evidence):
                evidence += check_report(report)  # a reward file saying "solved" now contradicts it
    expects = facts.expects_per_assertion
    if expects is None:  # a per-assertion file is there but unusable (read_report's UNPARSABLE with a b)
        expects = report.fallback is FallbackCause.UNPARSABLE and report.binary is not None
    silent = None
    if not (timed_out or crashed or sabotage or facts.verifier_proven or pytest_ran(stdout)):
        silent = (
            "the verifier wrote nothing: no report file in its output folder and no pytest session in what "
            "test.sh printed; dropped as an infrastructure failure, never the agent's 0"
        )
    not_run = None
    if not (timed_out or crashed or sabotage or infrastructure_error):
        not_run = no_run_cause(
            report,
            stdout,
            expects_per_assertion=expects,
            verifier_proven=facts.verifier_proven,
            test_dependencies=facts.test_dependencies,
        )
    summary = parse_pytest_summary(stdout)[0] if stdout else None
    closing_passed = summary.passed if summary is not None and summary.counts else None
    return report, judge(
        report,
        spec,
        infrastructure_error=infrastructure_error,
        evidence=evidence,
        expects_per_assertion=expects,
        sabotage=sabotage,
        environment_cause=environment_cause,
        closing_passed=closing_passed,
        silent=silent,
        not_run=not_run,
    )
