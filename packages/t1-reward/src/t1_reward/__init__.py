"""Verifier reports to per-assertion outcomes to scalar reward (T1 §5).

`read_report` reads a verifier directory (CTRF JSON, JUnit XML, reward.json / reward.txt) into a `Report`;
`compute_reward` turns it into the trial's scalar under a reward spec (dense P/S by default, T1 §5.2, Eq. 20),
falling back to the binary outcome, tagged by cause, when the per-assertion report is not usable;
`check_report` refuses a report the task could not have produced (tamper evidence), and `judge` is the one
scoring policy of a verifier run (dropped, scored 0, or scored; `t1_reward.verdict`), which `score_output`
applies to a verifier's output folder for training, ``t1 eval`` and ``t1 reward`` alike.
"""

from t1_reward.integrity import (
    NOT_REPORTED,
    UNVERIFIABLE_CHECKS,
    PytestSummary,
    TamperEvidence,
    check_report,
    missing_as_failed,
    parse_pytest_summary,
    summary_cut,
)
from t1_reward.outcomes import (
    AssertionOutcome,
    AssertionStatus,
    Counts,
    FallbackCause,
    Report,
    VerifierReportError,
    count_outcomes,
    fold_outcomes,
)
from t1_reward.parsers import parse_ctrf, parse_junit, parse_reward_json, parse_reward_txt, xml_root_tag
from t1_reward.pytest_output import case_outcomes, expand_collapsed
from t1_reward.report import MAX_REPORT_BYTES, captured_output, read_report
from t1_reward.reward import RATIO_COEFFICIENT, RewardResult, compute_reward, dense_reward, ratio_reward
from t1_reward.scoring import TaskFacts, pytest_ran, score_output
from t1_reward.verdict import Verdict, judge

__all__ = [
    "MAX_REPORT_BYTES",
    "RATIO_COEFFICIENT",
    "AssertionOutcome",
    "AssertionStatus",
    "Counts",
    "FallbackCause",
    "PytestSummary",
    "Report",
    "RewardResult",
    "TamperEvidence",
    "TaskFacts",
    "Verdict",
    "VerifierReportError",
    "captured_output",
    "case_outcomes",
    "check_report",
    "expand_collapsed",
    "missing_as_failed",
    "NOT_REPORTED",
    "UNVERIFIABLE_CHECKS",
    "compute_reward",
    "count_outcomes",
    "dense_reward",
    "fold_outcomes",
    "judge",
    "parse_ctrf",
    "parse_junit",
    "parse_pytest_summary",
    "parse_reward_json",
    "parse_reward_txt",
    "pytest_ran",
    "ratio_reward",
    "read_report",
    "score_output",
    "summary_cut",
    "xml_root_tag",
]
