"""Reports read as their tools mean them: collapsed parametrized cases, reruns, stray bytes, reward.json.

Expected values come from the tools themselves: ``data/ctrf-0.3.5-parametrized.json`` is the report that
pytest-json-ctrf 0.3.5 (the version Terminal-Bench 2 pins) wrote for ``data/ctrf-0.3.5-parametrized
.test_outputs.py.txt`` (pytest said ``1 failed, 9 passed``); the JUnit rerun layouts are those of
pytest-rerunfailures 16.6.1 (one ``<testcase>`` per attempt) and Maven Surefire (``<flakyFailure>``);
reward.json is read as Harbor 0.13.1's ``VerifierResult`` (pydantic ``dict[str, float | int]``) and its
primary-reward rule (``"reward"``, else the first value) read it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from t1_reward import (
    AssertionStatus,
    FallbackCause,
    Report,
    VerifierReportError,
    check_report,
    compute_reward,
    parse_ctrf,
    read_report,
)
from t1_spec import BinaryRewardSpec, DenseRewardSpec

DATA = Path(__file__).parent / "data"
DENSE = DenseRewardSpec()
P, F = AssertionStatus.PASSED, AssertionStatus.FAILED


def _legacy(*entries: tuple[str, str, int | None]) -> str:
    """A report as pytest-json-ctrf 0.3.x writes it: only ``results``, snake-case keys, no retries at 1."""
    tests = []
    for name, status, retries in entries:
        test: dict = {"name": name, "status": status, "duration": 0.01, "file_path": "test_outputs.py"}
        if retries is not None:
            test["retries"] = retries
        tests.append(test)
    summary = {"tests": len(tests), "passed": sum(t["status"] == "passed" for t in tests)}
    return json.dumps({"results": {"tool": {"name": "pytest"}, "summary": summary, "tests": tests}})


# --- pytest-json-ctrf 0.3.5 collapses parametrized cases -------------------------------------------------


def test_the_real_0_3_5_report_counts_every_parametrized_case(tmp_path):
    # test_all_pass: 4 cases, passed; test_two_cases: 2 cases, passed (retries left out); test_one_fails: 3
    # cases, failed (the case that failed hides the two that passed); test_plain: 1 case, passed.
    # T = 4 + 2 + 3 + 1 = 10 (pytest ran 10); P = 4 + 2 + 0 + 1 = 7 (a lower bound of pytest's 9).
    (tmp_path / "ctrf.json").write_bytes((DATA / "ctrf-0.3.5-parametrized.json").read_bytes())
    report = read_report(tmp_path)
    assert report.fallback is None and report.source == "ctrf"
    assert (report.passed, report.total) == (7, 10)  # the entries alone gave (3, 4)
    assert report.collapsed == 3
    assert {o.name.split("::")[-1]: o.cases for o in report.outcomes} == {
        "test_all_pass": 4,
        "test_two_cases": 2,
        "test_one_fails": 3,
        "test_plain": 1,
    }
    assert "collapse 9 parametrized cases" in report.detail and "0.6" in report.detail
    assert compute_reward(report, DENSE).value == pytest.approx(7 / 20)


def test_four_collapsed_passing_cases_score_four_twentieths_not_one():
    # The figure: four parametrized cases that all passed, one 0.3.5 entry: 4/20 = 0.2, not 0.05.
    report = Report(parse_ctrf(_legacy(("t.py::test_x", "passed", 3))), None, "ctrf", None)
    assert (report.passed, report.total) == (4, 4)
    assert compute_reward(report, DENSE).value == pytest.approx(0.2)


def test_pytests_closing_line_agrees_with_the_counted_cases():
    # pytest printed "1 failed, 9 passed" for the real report: 10 tests. Counting entries (4) disagreed with
    # it, and check_report refused the honest report as tampered.
    text = (DATA / "ctrf-0.3.5-parametrized.json").read_text()
    report = Report(parse_ctrf(text), None, "ctrf", None)
    stdout = "=== test session starts ===\n...\n=== 1 failed, 9 passed in 3.61s ===\n"
    assert check_report(report, known_assertions=10, stdout=stdout) == ()


def test_a_collapsed_entry_is_only_a_0_3_x_entry():
    # 0.6 names each case "test_x[1]" and writes camelCase filePath; retries there count reruns of one test.
    test = {"name": "t.py::test_x[1]", "status": "passed", "filePath": "t.py", "retries": 2, "flaky": True}
    text = json.dumps({"results": {"tests": [test]}})
    (outcome,) = parse_ctrf(text)
    assert outcome.cases == 1 and outcome.status is P


@pytest.mark.parametrize("retries", [-1, "3", True, 1.5])
def test_a_collapsed_entry_with_a_bad_retries_count_is_refused(retries):
    text = _legacy(("t.py::test_x", "passed", 0)).replace('"retries": 0', f'"retries": {json.dumps(retries)}')
    with pytest.raises(VerifierReportError, match="retries"):
        parse_ctrf(text)


def test_inflating_retries_is_held_to_the_known_count():
    # A program under test that writes retries: 999 on a passed 0.3.x entry claims 1000 assertions.
    report = Report(parse_ctrf(_legacy(("t.py::test_x", "passed", 999))), None, "ctrf", None)
    evidence = check_report(report, known_assertions=4)
    assert [e.check for e in evidence] == ["assertion_count"] and evidence[0].claimed == 1000


# --- reruns count at their final status ------------------------------------------------------------------


def _junit(*cases: str) -> str:
    return (
        '<?xml version="1.0"?><testsuites><testsuite name="pytest">'
        + "".join(cases)
        + "</testsuite></testsuites>"
    )


def test_a_junit_test_that_passed_on_rerun_counts_as_passed(tmp_path):
    # pytest-rerunfailures reported every attempt: failure, error, then the final pass; pytest says passed.
    (tmp_path / "junit.xml").write_text(
        _junit(
            '<testcase classname="t" name="test_flaky"><failure message="boom"/></testcase>',
            '<testcase classname="t" name="test_flaky"><error message="broke"/></testcase>',
            '<testcase classname="t" name="test_flaky"/>',
            '<testcase classname="t" name="test_ok"/>',
        )
    )
    report = read_report(tmp_path)
    assert (report.passed, report.total, report.duplicates) == (2, 2, 2)
    assert compute_reward(report, DENSE).value == pytest.approx(2 / 20)


def test_rerun_attempts_of_a_test_that_still_fails_count_once_as_failed(tmp_path):
    # pytest-rerunfailures 16.6.1: two empty records for the reruns, then the final failure (0/1, not 2/3).
    (tmp_path / "junit.xml").write_text(
        _junit(
            '<testcase classname="t" name="test_always_fails"/>',
            '<testcase classname="t" name="test_always_fails"/>',
            '<testcase classname="t" name="test_always_fails"><failure message="assert False"/></testcase>',
        )
    )
    report = read_report(tmp_path)
    assert (report.passed, report.total) == (0, 1)


def test_surefire_flaky_children_are_history_not_the_status(tmp_path):
    (tmp_path / "junit.xml").write_text(
        _junit(
            '<testcase classname="t" name="a"><flakyFailure message="first try"/></testcase>',
            '<testcase classname="t" name="b"><rerunFailure message="1st"/>'
            '<failure message="final"/></testcase>',
        )
    )
    report = read_report(tmp_path)
    assert {o.name: o.status for o in report.outcomes} == {"t::a": P, "t::b": F}


def test_a_ctrf_rerun_appended_to_the_report_counts_at_its_final_status(tmp_path):
    tests = [{"name": "t.py::test_a", "status": "failed"}, {"name": "t.py::test_a", "status": "passed"}]
    (tmp_path / "ctrf.json").write_text(json.dumps({"results": {"tests": tests}}))
    report = read_report(tmp_path)
    assert (report.passed, report.total) == (1, 1)


# --- undecodable bytes in free text ----------------------------------------------------------------------


def test_a_latin1_byte_in_a_ctrf_message_keeps_the_statuses(tmp_path):
    body = (
        b'{"results": {"tests": [{"name": "t.py::test_a", "status": "failed", "message": "expected caf\xe9"},'
        b' {"name": "t.py::test_b", "status": "passed"}]}}'
    )
    (tmp_path / "ctrf.json").write_bytes(body)
    report = read_report(tmp_path)
    assert report.fallback is None and (report.passed, report.total) == (1, 2)
    assert report.outcomes[0].message == "expected caf\ufffd"
    assert "1 undecodable byte" in report.detail


def test_a_stray_byte_in_a_junit_failure_text_keeps_the_statuses(tmp_path):
    xml = _junit('<testcase classname="t" name="a"><failure message="m">diff: \xff\xfe</failure></testcase>',
                 '<testcase classname="t" name="b"/>')  # fmt: skip
    (tmp_path / "junit.xml").write_bytes(xml.encode("latin-1"))
    report = read_report(tmp_path)
    assert report.source == "junit" and (report.passed, report.total) == (1, 2)


def test_a_stray_byte_inside_a_status_still_refuses_the_report(tmp_path):
    (tmp_path / "ctrf.json").write_bytes(b'{"results": {"tests": [{"name": "a", "status": "pass\xe9d"}]}}')
    report = read_report(tmp_path)
    assert report.fallback is FallbackCause.UNPARSABLE and "status" in report.detail


# --- reward.json as Harbor reads it ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"reward": 1.0, "n_passed": 3, "n_total": 20}', 1.0),
        ('{"reward": 0.5, "loss": NaN}', 0.5),  # Python's json reads NaN; pydantic's float accepts it
        ('{"reward": 1, "solved": true}', 1.0),  # a boolean is a number to pydantic's lax float | int
        ('{"reward": "0.25"}', 0.25),  # so is a numeric string
        ('{"score": 0.5, "n_passed": 3}', 0.5),  # no "reward" key: the first value (Harbor's primary reward)
    ],
)
def test_reward_json_is_read_as_harbor_reads_it(tmp_path, content, expected):
    (tmp_path / "reward.json").write_text(content)
    report = read_report(tmp_path)
    assert report.binary == expected and report.source == "reward.json"
    assert compute_reward(report, BinaryRewardSpec()).value == expected


# --- the one scoring policy: a verifier the environment kept from running ---------------------------------


def test_judge_drops_a_run_without_report_that_the_environment_is_blamed_for():
    from t1_reward import TamperEvidence, judge

    cause = "verifier could not reach astral.sh: the sandbox has no network"
    zero_file = Report((), 0.0, "reward.txt", FallbackCause.MISSING)
    dropped = judge(zero_file, DENSE, expects_per_assertion=True, environment_cause=cause)
    assert (dropped.status, dropped.reward.value) == ("failed", None)
    assert cause in dropped.cause and "reward.txt is ignored" in dropped.cause
    # a report that came out is scored: the tests ran, whatever the environment
    scored = Report(parse_ctrf(_legacy(("t.py::test_x", "passed", 0))), 0.0, "ctrf", None)
    assert judge(scored, DENSE, environment_cause=cause).reward.value == pytest.approx(1 / 20)
    # tamper evidence still wins: forgery never pays, and is never dropped
    forged = judge(
        zero_file, DENSE, evidence=(TamperEvidence("tests_changed", "x"),), environment_cause=cause
    )
    assert (forged.status, forged.reward.value, forged.reward.kind) == ("finished", 0.0, "tampered")
