"""Malformed or hostile verifier output and bad arguments: P counts assertions once, reads never block,
numbers are parsed strictly, and counts are refused when they are not counts (T1 §5.2, Eq. 20)."""

import json
import math
import os
import threading
from pathlib import Path

import pytest

from t1_reward import (
    AssertionOutcome,
    AssertionStatus,
    FallbackCause,
    Report,
    compute_reward,
    dense_reward,
    fold_outcomes,
    parse_ctrf,
    parse_reward_txt,
    ratio_reward,
    read_report,
    xml_root_tag,
)
from t1_spec import BinaryRewardSpec, DenseRewardSpec, RatioRewardSpec

SPECS = {"dense": DenseRewardSpec, "ratio": RatioRewardSpec, "binary": BinaryRewardSpec}


def Spec(kind: str, **fields):  # noqa: N802 - reads like the spec it builds
    """The recipe's reward section of ``kind`` (a real t1_spec spec, so its defaults and rules apply)."""
    return SPECS[kind](**fields)


DENSE = Spec("dense")
P, F, S = AssertionStatus.PASSED, AssertionStatus.FAILED, AssertionStatus.SKIPPED


def ctrf(*tests: tuple[str, str], summary: int | None = None) -> str:
    results: dict = {"tests": [{"name": n, "status": s} for n, s in tests]}
    if summary is not None:
        results["summary"] = {"tests": summary}
    return json.dumps({"results": results})


def junit(*cases: tuple[str, str, str | None]) -> str:
    """JUnit XML with (classname, name, child) cases; child is None (passed), "failure" or "skipped"."""
    body = "".join(
        f'<testcase classname="{c}" name="{n}">' + (f'<{k} message="m"/>' if k else "") + "</testcase>"
        for c, n, k in cases
    )
    return f'<?xml version="1.0"?><testsuites><testsuite name="s">{body}</testsuite></testsuites>'


# --- 1. a test name counts once -------------------------------------------------------------------------


def test_thirty_copies_of_one_passed_test_count_as_one_assertion(tmp_path):
    # One assertion passed: P = 1, T = 1, r = 1/20, whatever the number of copies the report lists.
    (tmp_path / "ctrf.json").write_text(ctrf(*[("test_a", "passed")] * 30, summary=30))
    report = read_report(tmp_path)
    assert report.fallback is None and report.source == "ctrf"
    assert (report.passed, report.total) == (1, 1)  # not (30, 30)
    assert report.duplicates == 29
    result = compute_reward(report, DENSE)
    assert result.value == pytest.approx(1 / 20)
    assert result.duplicates == 29
    assert "29 duplicate" in report.detail and "test_a" in report.detail
    assert report.outcomes[0].entries == 30  # the information is kept on the assertion


def test_the_duplicate_note_quotes_at_most_five_names_cut_short(tmp_path):
    names = [f"test_{i}_" + "y" * 500 for i in range(7)]
    (tmp_path / "ctrf.json").write_text(ctrf(*[(n, "passed") for n in names * 2]))
    report = read_report(tmp_path)
    assert (report.passed, report.total, report.duplicates) == (7, 7, 7)
    assert "and 2 more" in report.detail and len(report.detail) < 1000


def test_a_repeated_name_passes_only_if_every_entry_passed(tmp_path):
    # a: passed then failed -> failed; b: passed twice -> passed; c: passed then skipped -> not passed.
    entries = [("a", "passed"), ("b", "passed"), ("a", "failed"), ("b", "passed"), ("c", "passed")]
    text = ctrf(*entries, ("c", "skipped"))
    (tmp_path / "ctrf.json").write_text(text)
    report = read_report(tmp_path)
    assert (report.passed, report.total) == (1, 3)
    assert {o.name: o.status for o in report.outcomes} == {"a": F, "b": P, "c": S}
    assert report.duplicates == 3
    assert compute_reward(report, DENSE).value == pytest.approx(1 / 20)


def test_parametrized_cases_have_distinct_names_and_count_separately(tmp_path):
    text = ctrf(("test_x[a]", "passed"), ("test_x[b]", "passed"), ("test_y", "failed"))
    (tmp_path / "ctrf.json").write_text(text)
    report = read_report(tmp_path)
    assert (report.passed, report.total, report.duplicates) == (2, 3, 0)
    assert report.detail is None


def test_junit_duplicate_testcases_fold_within_and_across_files(tmp_path):
    # junit.xml lists t.test_a twice (pass, fail); rerun.xml repeats t.test_b (pass) and adds t.test_c (pass).
    # Assertions: test_a failed, test_b passed, test_c passed -> P = 2, T = 3, 2 entries folded.
    first = junit(("t", "test_a", None), ("t", "test_a", "failure"), ("t", "test_b", None))
    (tmp_path / "junit.xml").write_text(first)
    (tmp_path / "rerun.xml").write_text(junit(("t", "test_b", None), ("t", "test_c", None)))
    report = read_report(tmp_path)
    assert report.source == "junit" and report.fallback is None
    assert (report.passed, report.total) == (2, 3)
    assert report.duplicates == 2
    # same test name under another classname is another assertion
    (tmp_path / "other.xml").write_text(junit(("u", "test_a", None)))
    assert (read_report(tmp_path).passed, read_report(tmp_path).total) == (3, 4)


def test_a_hand_built_report_with_repeated_names_cannot_inflate_p():
    outcomes = tuple(AssertionOutcome("test_a", P) for _ in range(30))
    report = Report(outcomes=outcomes, binary=None, source="ctrf", fallback=None)
    assert (report.passed, report.total) == (1, 1)
    assert report.duplicates == 29
    assert compute_reward(report, DENSE).value == pytest.approx(1 / 20)


def test_fold_outcomes_keeps_order_and_the_worst_message_and_is_idempotent():
    raw = (
        AssertionOutcome("b", P),
        AssertionOutcome("a", S, "skipped here"),
        AssertionOutcome("a", F, "boom"),
        AssertionOutcome("b", P),
    )
    folded = fold_outcomes(raw)
    assert folded == (AssertionOutcome("b", P, None, 2), AssertionOutcome("a", F, "boom", 2))
    assert fold_outcomes(folded) == folded


def test_one_title_in_two_ctrf_files_is_two_assertions():
    # A reporter with bare titles: "renders" in a.test.js and in b.test.js are two tests; a repeat within
    # a.test.js is the same test. Assertions: a::renders (passed), b::renders (passed) -> P = 2, T = 2.
    tests = [
        {"name": "renders", "status": "passed", "filePath": "a.test.js"},
        {"name": "renders", "status": "passed", "filePath": "b.test.js"},
        {"name": "renders", "status": "passed", "filePath": "a.test.js"},
    ]
    report = Report(parse_ctrf(json.dumps({"results": {"tests": tests}})), None, "ctrf", None)
    assert (report.passed, report.total, report.duplicates) == (2, 2, 1)
    assert {o.name for o in report.outcomes} == {"a.test.js::renders", "b.test.js::renders"}


def test_the_ctrf_parser_itself_returns_the_file_entries_unfolded():
    assert len(parse_ctrf(ctrf(("a", "passed"), ("a", "passed")))) == 2


# --- 2. only <testsuites>/<testsuite> XML files are JUnit reports ------------------------------------------


COVERAGE_XML = '<?xml version="1.0"?><coverage version="7.4" line-rate="0.9"><packages/></coverage>'


def test_coverage_xml_next_to_junit_is_ignored_not_fatal(tmp_path):
    (tmp_path / "junit.xml").write_text(junit(("t", "a", None), ("t", "b", "failure")))
    (tmp_path / "coverage.xml").write_text(COVERAGE_XML)
    report = read_report(tmp_path)
    assert report.fallback is None and report.source == "junit"
    assert (report.passed, report.total) == (1, 2)
    assert "coverage.xml ignored" in report.detail and "<coverage>" in report.detail


def test_only_non_junit_xml_is_missing_not_unparsable(tmp_path):
    (tmp_path / "coverage.xml").write_text(COVERAGE_XML)
    (tmp_path / "reward.txt").write_text("1")
    report = read_report(tmp_path)
    assert report.fallback is FallbackCause.MISSING and report.binary == 1.0


@pytest.mark.parametrize("content", ["", "not xml at all", "<testsuites><testsuite><testcase name='a'>"])
def test_xml_that_may_be_a_broken_junit_report_is_still_unparsable(tmp_path, content):
    (tmp_path / "junit.xml").write_text(content)
    assert read_report(tmp_path).fallback is FallbackCause.UNPARSABLE


def test_xml_root_tag_reads_the_start_tag_even_of_a_truncated_document():
    assert xml_root_tag("<?xml version='1.0'?><testsuites><testsuite><testc") == "testsuites"
    assert xml_root_tag(COVERAGE_XML) == "coverage"
    assert xml_root_tag("") is None and xml_root_tag("hello") is None


# --- 3. UTF-8 byte-order mark ---------------------------------------------------------------------------


def test_ctrf_and_reward_files_with_a_utf8_bom_are_read(tmp_path):
    bom = b"\xef\xbb\xbf"
    (tmp_path / "ctrf.json").write_bytes(bom + ctrf(("a", "passed"), ("b", "failed")).encode())
    (tmp_path / "reward.json").write_bytes(bom + b'{"reward": 0.0}')
    report = read_report(tmp_path)
    assert report.source == "ctrf" and report.fallback is None and report.detail is None
    assert (report.passed, report.total, report.binary) == (1, 2, 0.0)
    (tmp_path / "reward.json").unlink()
    (tmp_path / "reward.txt").write_bytes(bom + b"1\n")
    assert read_report(tmp_path).binary == 1.0


# --- 4. P and S are counts ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("passed", "scale", "argument"),
    [
        (math.nan, 20, "passed"),
        (2.5, 20, "passed"),
        (math.inf, 20, "passed"),
        (-1, 20, "passed"),
        (True, 20, "passed"),
        ("3", 20, "passed"),
        (3, 2.5, "scale"),
        (3, 0, "scale"),
        (3, -20, "scale"),
        (3, math.inf, "scale"),
        (3, math.nan, "scale"),
        (3, True, "scale"),
    ],
)
def test_dense_reward_refuses_what_is_not_a_count(passed, scale, argument):
    with pytest.raises(ValueError, match=argument):
        dense_reward(passed, scale)


def test_dense_reward_accepts_integral_floats():
    # The recipe's scale is read as a float (20.0): it is still the count 20.
    assert dense_reward(3.0, 20.0) == pytest.approx(3 / 20)
    assert dense_reward(0, 1) == 0.0


# --- 5. the ratio variant's coefficient and counts -----------------------------------------------------


@pytest.mark.parametrize(
    ("args", "argument"),
    [
        ((1, 2, 0.0, -0.4), "coefficient"),
        ((1, 2, 0.0, 1.5), "coefficient"),
        ((1, 2, 0.0, math.nan), "coefficient"),
        ((1.5, 2, 0.0, 0.4), "passed"),
        ((1, math.nan, 0.0, 0.4), "total"),
        ((1, 2.5, 0.0, 0.4), "total"),
        ((1, 2, math.inf, 0.4), "binary"),
        ((1, 2, True, 0.4), "binary"),
    ],
)
def test_ratio_reward_refuses_bad_arguments_naming_them(args, argument):
    with pytest.raises(ValueError, match=argument):
        ratio_reward(*args)


def test_ratio_reward_coefficient_bounds_are_inclusive():
    # c = 0: the ratio term vanishes, r = b; c = 1: r = max(b, P/T) = 3/4.
    assert ratio_reward(3, 4, 0.0, 0.0) == 0.0
    assert ratio_reward(3, 4, 0.0, 1.0) == pytest.approx(0.75)


def test_compute_reward_refuses_a_negative_ratio_coefficient():
    report = Report((AssertionOutcome("a", P), AssertionOutcome("b", F)), 0.0, "ctrf", None)
    with pytest.raises(ValueError, match="coefficient"):
        compute_reward(report, Spec("ratio", coefficient=-0.4))


def test_compute_reward_refuses_a_fractional_scale():
    report = Report((AssertionOutcome("a", P),), None, "ctrf", None)
    with pytest.raises(ValueError, match="scale"):
        compute_reward(report, Spec("dense", scale=17.5))


# --- 6. reward.txt is a plain decimal number ------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "quoted"),
    [
        ("1_0", "'1_0'"),
        ("1_000.5\n", "'1_000.5'"),
        ("inf", "'inf'"),
        ("\u0661", "'\u0661'"),  # ARABIC-INDIC DIGIT ONE: float() reads it as 1.0
        ("0x1", "'0x1'"),
    ],
)
def test_reward_txt_that_float_would_accept_is_unparsable_and_quoted(tmp_path, content, quoted):
    (tmp_path / "reward.txt").write_text(content, encoding="utf-8")
    report = read_report(tmp_path)
    assert report.binary is None and report.fallback is FallbackCause.UNPARSABLE
    assert quoted in report.detail
    assert compute_reward(report, DENSE).value is None  # never read as a number, never scored as 0


def test_reward_txt_cause_quotes_long_text_truncated(tmp_path):
    (tmp_path / "reward.txt").write_text("x" * 10_000)
    detail = read_report(tmp_path).detail
    assert "'" + "x" * 40 + "'..." in detail and len(detail) < 200


def test_reward_txt_out_of_range_is_not_finite(tmp_path):
    (tmp_path / "reward.txt").write_text("1e999")
    report = read_report(tmp_path)
    assert report.binary is None and "not finite" in report.detail


@pytest.mark.parametrize(
    ("content", "value"),
    [("1", 1.0), (" 0.5\n", 0.5), ("-0", 0.0), ("+1", 1.0), (".5", 0.5), ("1.", 1.0), ("1e-05", 1e-05)],
)
def test_reward_txt_plain_decimals_are_read(content, value):
    assert parse_reward_txt(content) == value


# --- 7. never block on a non-regular file ---------------------------------------------------------------


def read_report_within(path: Path, seconds: float = 10.0) -> Report:
    """read_report in a thread; fail (and unblock it) if it has not returned in time."""
    box: list[Report] = []
    thread = threading.Thread(target=lambda: box.append(read_report(path)), daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        for fifo in path.iterdir():  # a writer opening the FIFO releases a reader blocked in open()
            if fifo.is_fifo():
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(5)
        pytest.fail(f"read_report blocked for more than {seconds} s")
    return box[0]


@pytest.mark.parametrize("name", ["reward.txt", "reward.json", "ctrf.json", "junit.xml"])
def test_a_fifo_report_file_is_not_read_and_does_not_block(tmp_path, name):
    os.mkfifo(tmp_path / name)
    report = read_report_within(tmp_path)
    assert report.fallback is FallbackCause.UNPARSABLE
    assert name in report.detail and "FIFO" in report.detail and "not a regular file" in report.detail
    assert compute_reward(report, DENSE).value is None  # no outcome: an infrastructure failure, not a 0


def test_a_fifo_reward_txt_does_not_spoil_a_good_ctrf(tmp_path):
    (tmp_path / "ctrf.json").write_text(ctrf(("a", "passed")))
    os.mkfifo(tmp_path / "reward.txt")
    report = read_report_within(tmp_path)
    assert report.fallback is None and report.binary is None and report.passed == 1
    assert "reward.txt" in report.detail and "FIFO" in report.detail


def test_a_directory_named_ctrf_json_is_unparsable(tmp_path):
    (tmp_path / "ctrf.json").mkdir()
    (tmp_path / "reward.txt").write_text("1")
    report = read_report(tmp_path)
    assert report.fallback is FallbackCause.UNPARSABLE and "directory" in report.detail
    assert compute_reward(report, DENSE).value == 1.0


# --- 8. a CTRF status outside the spec is a report format slip, never the agent's 0 ---------------------


@pytest.mark.parametrize(
    ("raw", "status"),
    [("PASSED", P), ("Passed", P), ("FAILED", F), ("Skipped", S), ("PENDING", S),
     ("Other", AssertionStatus.OTHER)],
)  # fmt: skip
def test_ctrf_statuses_match_case_insensitively(raw, status):
    """CTRF's five statuses (passed, failed, skipped, pending, other) in any letter case."""
    (outcome,) = parse_ctrf(ctrf(("a", raw)))
    assert outcome.status is status


def test_upper_case_passed_scores_as_passed(tmp_path):
    """Issue: {"name": "a", "status": "PASSED"} gave P = 0, scored as the agent's 0; one pass is 1/20."""
    (tmp_path / "ctrf.json").write_text(ctrf(("a", "PASSED"), ("b", "passed"), ("c", "FAILED")))
    report = read_report(tmp_path)
    assert report.fallback is None and (report.passed, report.total) == (2, 3)
    assert compute_reward(report, DENSE).value == pytest.approx(2 / 20)


@pytest.mark.parametrize("raw", ["ok", "pass", "error", "", "passed ", "PASSED\n"])
def test_unknown_ctrf_status_makes_the_report_unparsable_and_names_it(tmp_path, raw):
    """Issue: status "ok" silently counted as failed (P = 0, r = 0, empty detail)."""
    (tmp_path / "ctrf.json").write_text(ctrf(("a", "passed"), ("b", raw)))
    report = read_report(tmp_path)
    assert report.fallback is FallbackCause.UNPARSABLE
    assert repr(raw) in report.detail and "results.tests[1]" in report.detail
    assert compute_reward(report, DENSE).value is None  # no binary either: an infrastructure failure


def test_unknown_ctrf_status_falls_back_to_the_binary_outcome(tmp_path):
    (tmp_path / "ctrf.json").write_text(ctrf(("a", "ok")))
    (tmp_path / "reward.txt").write_text("1")
    report = read_report(tmp_path)
    result = compute_reward(report, DENSE)
    assert (result.value, result.kind, result.fallback) == (1.0, "binary_fallback", FallbackCause.UNPARSABLE)
    assert "'ok'" in report.detail


# --- 9. a binary outcome lies in [0, 1] ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "quoted"),
    [('{"reward": -1}', "-1"), ('{"reward": 2.5}', "2.5"), ('{"reward": 1.0000001}', "1.0000001"),
     ('{"reward": -0.5, "extra": 3}', "-0.5")],
)  # fmt: skip
def test_reward_json_outside_0_1_is_unparsable_not_a_reward(tmp_path, content, quoted):
    """Issue: {"reward": -1} / 2.5 without a per-assertion report was scored -1.0 / 2.5 (binary_fallback)."""
    (tmp_path / "reward.json").write_text(content)
    report = read_report(tmp_path)
    assert report.binary is None and report.fallback is FallbackCause.UNPARSABLE
    assert "reward.json" in report.detail and quoted in report.detail and "[0, 1]" in report.detail
    for kind in ("dense", "ratio", "binary"):
        assert compute_reward(report, Spec(kind)).value is None


@pytest.mark.parametrize(("content", "quoted"), [("-1", "'-1'"), ("2.5\n", "'2.5'"), ("1e3", "'1e3'")])
def test_reward_txt_outside_0_1_is_unparsable_not_a_reward(tmp_path, content, quoted):
    (tmp_path / "reward.txt").write_text(content)
    report = read_report(tmp_path)
    assert report.binary is None and report.fallback is FallbackCause.UNPARSABLE
    assert quoted in report.detail and "[0, 1]" in report.detail
    assert compute_reward(report, Spec("binary")).value is None


@pytest.mark.parametrize(
    "content", ['{"reward": 0}', '{"reward": 1}', '{"reward": 0.25}', '{"reward": -0.0}']
)
def test_reward_json_inside_0_1_is_the_binary(tmp_path, content):
    (tmp_path / "reward.json").write_text(content)
    report = read_report(tmp_path)
    assert report.binary == json.loads(content)["reward"] and report.fallback is FallbackCause.MISSING


def test_out_of_range_reward_file_does_not_spoil_a_good_ctrf(tmp_path):
    """The dense reward still comes from the assertions; the bad binary is noted, not used."""
    (tmp_path / "ctrf.json").write_text(ctrf(("a", "passed"), ("b", "failed")))
    (tmp_path / "reward.json").write_text('{"reward": 2.5}')
    report = read_report(tmp_path)
    assert report.fallback is None and report.binary is None and "2.5" in report.detail
    assert compute_reward(report, DENSE).value == pytest.approx(1 / 20)


# --- a malformed report is unparsable, never a reader crash (a crash would drop the trial) ----------------


@pytest.mark.parametrize("name", ["ctrf.json", "reward.json"])
def test_a_deeply_nested_report_is_unparsable_not_a_crash(tmp_path, name):
    # json.loads recurses per level: 100,000 levels overflow the interpreter's stack (RecursionError), which
    # used to escape read_report, so the trial was dropped instead of scored: the agent chose its fate.
    (tmp_path / name).write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "reward.txt").write_text("1")
    report = read_report(tmp_path)
    assert report.fallback is FallbackCause.UNPARSABLE
    assert "nested too deeply" in report.detail


def test_a_boolean_reward_is_not_a_number(tmp_path):
    (tmp_path / "reward.json").write_text('{"reward": true}')
    report = read_report(tmp_path)
    assert report.binary is None and report.fallback is FallbackCause.UNPARSABLE
    assert "boolean" in report.detail
