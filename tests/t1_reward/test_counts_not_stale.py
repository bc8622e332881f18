"""`Report.counts` is kept once read; every path that changes a report's outcomes makes a new report, whose
counts are its own (a stale P or T would pay for outcomes the report no longer has, T1 §5.2, Eq. 20)."""

import dataclasses

from t1_reward import AssertionOutcome, AssertionStatus, Report, expand_collapsed, missing_as_failed

P, F = AssertionStatus.PASSED, AssertionStatus.FAILED


def test_missing_assertions_count_after_the_counts_were_read():
    report = Report((AssertionOutcome("t::a", P), AssertionOutcome("t::b", P)), 1.0, "ctrf", None)
    assert (report.passed, report.total) == (2, 2)  # read first: the counts are kept on this report
    padded = missing_as_failed(report, 5)
    assert (padded.passed, padded.total) == (2, 5)
    assert (report.passed, report.total) == (2, 2)


def test_a_replaced_report_counts_its_own_outcomes():
    report = Report((AssertionOutcome("t::a", P),), 1.0, "ctrf", None)
    assert report.passed == 1
    failed = dataclasses.replace(report, outcomes=(AssertionOutcome("t::a", F),))
    assert (failed.passed, failed.total) == (0, 1)


def test_expanding_collapsed_cases_after_the_counts_were_read():
    report = Report((AssertionOutcome("test_x.py::test_sizes", F, cases=3),), 0.0, "ctrf", None)
    assert (report.total, report.collapsed) == (3, 1)
    stdout = "\n".join(  # pytest -v's lines, as the verifier's captured output holds them
        [f"../tests/test_x.py::test_sizes[{n}] PASSED   [ 50%]" for n in (1, 2)]
        + ["../tests/test_x.py::test_sizes[3] FAILED   [100%]", "=== 1 failed, 2 passed in 0.01s ==="]
    )
    expanded = expand_collapsed(report, stdout)
    assert expanded is not report
    assert (expanded.passed, expanded.total, expanded.collapsed) == (2, 3, 0)
