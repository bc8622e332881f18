"""Report checks: a report the task could not have produced is refused with its evidence; the policy."""

import pytest

from t1_reward import (
    AssertionOutcome,
    AssertionStatus,
    FallbackCause,
    Report,
    TamperEvidence,
    check_report,
    judge,
    parse_pytest_summary,
)
from t1_spec import DenseRewardSpec

P, F = AssertionStatus.PASSED, AssertionStatus.FAILED
NAMES = {"test_outputs.py": frozenset({"test_a", "test_b", "TestC::test_d", "test_e"})}


def _report(*outcomes, binary=None, fallback=None, source="ctrf"):
    return Report(tuple(AssertionOutcome(n, s) for n, s in outcomes), binary, source, fallback)


def test_more_assertions_than_the_task_has_is_refused_with_both_counts():
    report = _report(*((f"test_outputs.py::test_{i}", P) for i in range(200)))
    (ev,) = [e for e in check_report(report, known_assertions=4) if e.check == "assertion_count"]
    assert (ev.claimed, ev.known) == (200, 4)


def test_names_that_no_test_file_defines_are_refused():
    report = _report(("test_outputs.py::test_a", P), ("test_outputs.py::test_zzz", P), ("x.py::test_a", P))
    (ev,) = check_report(report, known_assertions=4, known_tests=NAMES)
    assert ev.check == "unknown_test" and ev.names == ("test_outputs.py::test_zzz", "x.py::test_a")


@pytest.mark.parametrize(
    "name",
    [
        "test_outputs.py::test_a",
        "../tests/test_outputs.py::test_b",  # rootdir above tests/
        "test_outputs.py::TestC::test_d",
        "test_outputs.py::test_e[3-x::y]",  # parameters cut, even with '::' inside
        "tests.test_outputs.TestC::test_d",  # JUnit classname::name
        "test_outputs::test_a",
    ],
)
def test_real_names_in_every_reporter_form_pass(name):
    assert check_report(_report((name, P)), known_assertions=4, known_tests=NAMES) == ()


def test_pytests_closing_line_that_disagrees_is_evidence():
    stdout = "=== test session starts ===\nstuff\n" + "==== 2 failed, 2 passed in 0.31s ====\n"
    report = _report(*((f"test_outputs.py::test_{c}", P) for c in "abce"))
    (ev,) = check_report(report, known_assertions=4, stdout=stdout)
    assert (ev.check, ev.claimed, ev.known) == ("pytest_summary", 4, 2)


def test_a_closing_line_printed_by_the_program_earlier_does_not_count():
    stdout = (
        "=== test session starts ===\n---- captured ----\n4 passed in 0.01s\n"
        "=== short test summary info ===\n===== 3 failed, 1 passed in 0.40s =====\n"
    )
    summary, unfinished = parse_pytest_summary(stdout)
    assert summary.get("failed") == 3 and summary.passed == 1 and not unfinished


def test_a_session_without_a_closing_line_but_a_report_is_evidence():
    report = _report(("test_outputs.py::test_a", P))
    (ev,) = check_report(report, stdout="==== test session starts ====\ncollected 4 items\n")
    assert ev.check == "pytest_summary"


def test_an_honest_report_with_errors_and_skips_agrees_with_pytest():
    stdout = "== 1 failed, 2 passed, 1 skipped, 1 error, 3 warnings in 1.00s (0:00:01) =="
    report = _report(("a.py::test_a", P), ("a.py::test_b", P), ("a.py::test_c", F), ("a.py::test_d", F))
    report = Report(
        report.outcomes + (AssertionOutcome("a.py::test_s", AssertionStatus.SKIPPED),), None, "ctrf", None
    )
    assert check_report(report, known_assertions=5, stdout=stdout) == ()


def test_a_cut_in_the_output_makes_the_summary_unknown():
    stdout = "=== test session starts ===\n[... 900 bytes omitted: output over 8 bytes ...]\n"
    assert parse_pytest_summary(stdout) == (None, False)


def test_a_solved_binary_beside_failed_assertions_is_evidence():
    report = _report(("test_outputs.py::test_a", F), binary=1.0)
    (ev,) = check_report(report, known_assertions=4)
    assert ev.check == "binary_contradicts_report" and ev.names == ("test_outputs.py::test_a",)


# ---- the policy (t1_reward.judge) -------------------------------------------------------------------


def test_an_infrastructure_failure_is_dropped_never_a_zero():
    verdict = judge(
        _report(fallback=FallbackCause.VERIFIER_CRASH), DenseRewardSpec(), infrastructure_error="lost"
    )
    assert verdict.status == "failed" and verdict.reward.value is None and "lost" in verdict.cause


def test_a_tampered_report_scores_zero_and_is_trained_on():
    report = _report(*((f"t.py::test_{i}", P) for i in range(200)))
    ev = TamperEvidence("assertion_count", "200 > 4", claimed=200, known=4)
    verdict = judge(report, DenseRewardSpec(), evidence=(ev,))
    assert (verdict.status, verdict.reward.value, verdict.reward.kind) == ("finished", 0.0, "tampered")
    assert verdict.tampered and verdict.evidence == (ev,)


@pytest.mark.parametrize("fallback", [FallbackCause.VERIFIER_TIMEOUT, FallbackCause.VERIFIER_CRASH])
def test_an_agent_caused_verifier_failure_ignores_a_solved_reward_file(fallback):
    verdict = judge(_report(binary=1.0, fallback=fallback, source="reward.json"), DenseRewardSpec())
    assert (verdict.status, verdict.reward.value) == ("finished", 0.0) and fallback.value in verdict.cause


def test_no_report_at_all_in_a_healthy_sandbox_scores_zero():
    verdict = judge(_report(fallback=FallbackCause.MISSING, source="none"), DenseRewardSpec())
    assert (verdict.status, verdict.reward.value, verdict.reward.kind) == ("finished", 0.0, "no_verdict")


def test_a_reward_file_alone_from_a_normal_exit_keeps_the_binary_fallback():
    verdict = judge(
        _report(binary=1.0, fallback=FallbackCause.MISSING, source="reward.json"), DenseRewardSpec()
    )
    assert (verdict.reward.value, verdict.reward.kind) == (1.0, "binary_fallback")


def test_an_honest_report_is_scored_dense():
    verdict = judge(_report(("t.py::test_a", P), ("t.py::test_b", F)), DenseRewardSpec())
    assert verdict.reward.value == 1 / 20 and verdict.cause is None and not verdict.tampered


# ---- deleting failing entries must not pay (binary and ratio rewards) ---------------------------------


def _deleted_failures(binary=None):
    """The agent's program removed the two failing entries of a 4-assertion report: 2 passed remain."""
    return _report(("test_outputs.py::test_a", P), ("test_outputs.py::test_b", P), binary=binary)


def test_assertions_left_out_of_the_report_count_as_failed_against_the_validated_count():
    from t1_reward import NOT_REPORTED, missing_as_failed

    padded = missing_as_failed(_deleted_failures(), 4)
    assert (padded.passed, padded.total) == (2, 4)
    assert [o.name for o in padded.outcomes[2:]] == [f"{NOT_REPORTED}-1", f"{NOT_REPORTED}-2"]
    assert all(o.status is F for o in padded.outcomes[2:]) and "count as failed" in padded.detail


@pytest.mark.parametrize(
    ("spec", "honest_max"),
    [("binary", 0.0), ("ratio", 0.4 * 2 / 4)],
)
def test_deleting_failing_entries_does_not_raise_the_binary_or_ratio_reward(spec, honest_max):
    from t1_reward import missing_as_failed
    from t1_spec import BinaryRewardSpec, RatioRewardSpec

    reward_spec = {"binary": BinaryRewardSpec(), "ratio": RatioRewardSpec()}[spec]
    unpadded = judge(_deleted_failures(), reward_spec)
    assert unpadded.reward.value > honest_max  # the hole: without the validated count the deletion pays
    verdict = judge(missing_as_failed(_deleted_failures(), 4), reward_spec)
    assert verdict.reward.value == pytest.approx(honest_max)


def test_a_reward_file_saying_solved_over_a_padded_report_is_tampered():
    from t1_reward import missing_as_failed

    padded = missing_as_failed(_deleted_failures(binary=1.0), 4)
    assert [e.check for e in check_report(padded)] == ["binary_contradicts_report"]


def test_nothing_is_added_without_a_validated_count_or_when_nothing_is_missing():
    from t1_reward import missing_as_failed

    report = _deleted_failures()
    assert missing_as_failed(report, None) is report
    assert missing_as_failed(report, 2) is report
    fallback = _report(binary=0.0, fallback=FallbackCause.MISSING, source="none")
    assert missing_as_failed(fallback, 4) is fallback


# ---- a reward file alone, and sabotage of T1's own steps (rule 3 of t1_reward.judge) ------------------


@pytest.mark.parametrize("cause", [FallbackCause.MISSING, FallbackCause.UNPARSABLE])
def test_a_solved_reward_file_is_the_fallback_even_for_a_task_that_writes_a_per_assertion_report(cause):
    # T1 §5.2: the fallback is the binary outcome, so a solved task never scores 0 (it used to score 0 here)
    solved_file_only = _report(binary=1.0, fallback=cause, source="reward.txt")
    trusted = judge(solved_file_only, DenseRewardSpec())  # a task not known to write one
    assert trusted.reward.value == 1.0 and trusted.reward.kind == "binary_fallback"
    expected = judge(solved_file_only, DenseRewardSpec(), expects_per_assertion=True)
    assert (expected.status, expected.reward.value, expected.reward.kind) == (
        "finished",
        1.0,
        "binary_fallback",
    )
    assert cause.value in expected.cause
    # never more than the missing report would have paid: pytest's closing line said 3 passed
    capped = judge(solved_file_only, DenseRewardSpec(), expects_per_assertion=True, closing_passed=3)
    assert capped.reward.value == pytest.approx(3 / 20) and "capped" in capped.cause
    unsolved = judge(_report(binary=0.0, fallback=cause, source="reward.txt"), DenseRewardSpec(),
                     expects_per_assertion=True)  # fmt: skip
    assert (unsolved.reward.value, unsolved.reward.kind) == (0.0, "no_verdict")


def test_sabotage_of_t1s_own_steps_scores_zero_and_an_infrastructure_failure_is_dropped():
    honest = _report(("test_outputs.py::test_a", F))
    sabotaged = judge(honest, DenseRewardSpec(), sabotage="staging failed: No space left on device")
    assert (sabotaged.status, sabotaged.reward.value) == ("finished", 0.0)
    assert "No space left on device" in sabotaged.cause
    lost = judge(honest, DenseRewardSpec(), infrastructure_error="sandbox lost")
    assert lost.status == "failed" and lost.reward.value is None


# ---- a cut in the captured output never turns the closing-line check off ----------------------------------

FORGED_ALL_PASSED = [("test_outputs.py::test_a", P), ("test_outputs.py::test_b", P)]
SESSION = "=== test session starts ===\ncollected 2 items\n"
CUT = "[... 9437184 bytes omitted: over the 8388608-byte cap ...]\n"


@pytest.mark.parametrize(
    "stdout",
    [
        SESSION + "x" * 100 + "\n" + CUT,  # the flood hid the closing line (and the rewrite that failed it)
        SESSION + "===== 2 failed in 0.10s =====\n" + CUT,  # a cut after the closing line hides it too
        SESSION + "===== 2 failed in 0.10s =====\n[... 1 bytes omitted\n",  # a marker the program printed
    ],
)
def test_a_report_whose_closing_line_was_cut_away_is_not_trusted_alone(stdout):
    report = _report(*FORGED_ALL_PASSED)
    (ev,) = check_report(report, known_assertions=2, stdout=stdout)
    assert ev.check == "pytest_summary_cut" and "cut" in ev.detail
    verdict = judge(report, DenseRewardSpec(), evidence=(ev,))
    assert (verdict.status, verdict.reward.value, verdict.reward.kind) == ("finished", 0.0, "unverifiable")
    assert "not trusted alone" in verdict.cause


def test_the_same_rewrite_without_a_cut_is_caught_by_the_closing_line():
    stdout = SESSION + "===== 2 failed in 0.10s =====\n"
    (ev,) = check_report(_report(*FORGED_ALL_PASSED), known_assertions=2, stdout=stdout)
    assert ev.check == "pytest_summary"


def test_a_closing_line_kept_in_the_tail_after_a_cut_is_checked_as_usual():
    # an honest task whose tests print a lot: the verifier keeps head and tail, so the closing line survives
    stdout = SESSION + "x" * 100 + "\n" + CUT + "y" * 100 + "\n===== 2 passed in 9.10s =====\n"
    assert check_report(_report(*FORGED_ALL_PASSED), known_assertions=2, stdout=stdout) == ()
    stdout = stdout.replace("2 passed", "2 failed")
    assert [e.check for e in check_report(_report(*FORGED_ALL_PASSED), stdout=stdout)] == ["pytest_summary"]


def test_a_cut_in_the_output_of_a_verifier_that_is_not_pytest_is_no_evidence():
    report = _report(("suite::case_a", P), source="junit")
    assert check_report(report, stdout="building...\n" + CUT) == ()


def test_a_solved_reward_file_in_place_of_a_report_is_held_to_the_cut_too():
    solved_file = _report(binary=1.0, fallback=FallbackCause.UNPARSABLE, source="reward.txt")
    (ev,) = check_report(solved_file, stdout=SESSION + CUT)
    assert ev.check == "pytest_summary_cut"
    assert check_report(solved_file, stdout=SESSION + "===== 2 passed in 0.10s =====\n") == ()
