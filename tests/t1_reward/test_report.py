"""Reading verifier output directories: CTRF, JUnit, reward files, and tagged fallbacks (T1 §5.2)."""

import importlib.metadata
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from t1_reward import (
    AssertionStatus,
    FallbackCause,
    VerifierReportError,
    compute_reward,
    parse_ctrf,
    read_report,
)
from t1_spec import DenseRewardSpec

# A verifier as Harbor tasks write them: one test function per assertion, one parametrized, one skipped,
# one erroring in setup. Independent count: passed = a, p[1] -> 2; failed = b, p[2], e -> 3; skipped = c -> 1.
VERIFIER_TESTS = textwrap.dedent(
    """
    import pytest

    def test_a():
        assert True

    def test_b():
        assert 1 == 2, "boom"

    @pytest.mark.skip(reason="not applicable")
    def test_c():
        pass

    @pytest.mark.parametrize("x", [1, 2])
    def test_p(x):
        assert x == 1

    def test_e(missing_fixture):
        pass
    """
)


def Spec(kind: str):  # noqa: N802 - reads like the spec it builds
    """The recipe's reward section of ``kind`` (only ``dense`` is used here), a real t1_spec spec."""
    assert kind == "dense"
    return DenseRewardSpec()


@pytest.fixture(scope="module")
def real_reports(tmp_path_factory) -> Path:
    """Run pytest with pytest-json-ctrf (--ctrf) and --junitxml on a tiny verifier, in a subprocess."""
    root = tmp_path_factory.mktemp("verifier")
    (root / "test_outputs.py").write_text(VERIFIER_TESTS)
    (root / "pytest.ini").write_text("[pytest]\n")  # keep the workspace's pytest options out
    out = root / "logs"
    out.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-c", str(root / "pytest.ini"),
         "--rootdir", str(root), "--ctrf", str(out / "ctrf.json"), "--junitxml", str(out / "junit.xml"),
         str(root / "test_outputs.py")],
        cwd=root, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr  # some tests fail, as intended
    return out


def copy_only(src: Path, dst: Path, *names: str) -> Path:
    dst.mkdir(exist_ok=True)
    for name in names:
        (dst / name).write_bytes((src / name).read_bytes())
    return dst


def test_real_pytest_json_ctrf_report_gives_per_assertion_outcomes(real_reports, tmp_path):
    assert importlib.metadata.version("pytest-json-ctrf").startswith("0.6")
    d = copy_only(real_reports, tmp_path / "v", "ctrf.json")
    report = read_report(d)
    assert report.source == "ctrf" and report.fallback is None
    by_name = {o.name.split("::")[-1]: o.status for o in report.outcomes}
    assert by_name == {
        "test_a": AssertionStatus.PASSED,
        "test_b": AssertionStatus.FAILED,
        "test_c": AssertionStatus.SKIPPED,
        "test_p[1]": AssertionStatus.PASSED,  # 0.6 lists each parametrized case separately
        "test_p[2]": AssertionStatus.FAILED,
        "test_e": AssertionStatus.FAILED,
    }
    assert (report.passed, report.total) == (2, 6)
    assert compute_reward(report, Spec("dense")).value == pytest.approx(2 / 20)
    failed_b = next(o for o in report.outcomes if o.name.endswith("test_b"))
    assert "boom" in (failed_b.message or "")


def test_real_junit_xml_agrees_with_ctrf(real_reports, tmp_path):
    d = copy_only(real_reports, tmp_path / "v", "junit.xml")
    report = read_report(d)
    assert report.source == "junit" and report.fallback is None
    assert (report.passed, report.total) == (2, 6)
    statuses = sorted(o.status for o in report.outcomes)
    assert statuses.count(AssertionStatus.SKIPPED) == 1
    assert statuses.count(AssertionStatus.FAILED) == 3


def test_ctrf_wins_over_junit(real_reports, tmp_path):
    d = copy_only(real_reports, tmp_path / "v", "ctrf.json", "junit.xml")
    assert read_report(d).source == "ctrf"


def test_reward_file_alongside_ctrf_gives_binary(real_reports, tmp_path):
    d = copy_only(real_reports, tmp_path / "v", "ctrf.json")
    (d / "reward.txt").write_text("0\n")
    report = read_report(d)
    assert report.binary == 0.0 and report.source == "ctrf" and report.fallback is None


def test_missing_report_falls_back_to_binary_and_solved_task_scores_one(tmp_path):
    (tmp_path / "reward.txt").write_text("1\n")
    report = read_report(tmp_path)
    assert report.fallback is FallbackCause.MISSING
    assert report.source == "reward.txt" and report.binary == 1.0
    result = compute_reward(report, Spec("dense"))
    assert result.value == 1.0 and result.kind == "binary_fallback"


def test_missing_directory_is_missing_and_scores_none(tmp_path):
    report = read_report(tmp_path / "does-not-exist")
    assert report.fallback is FallbackCause.MISSING and report.binary is None and report.source == "none"
    assert "does not exist" in report.detail
    assert compute_reward(report, Spec("dense")).value is None


def test_empty_directory_scores_none_not_zero(tmp_path):
    result = compute_reward(read_report(tmp_path), Spec("dense"))
    assert result.value is None and result.fallback is FallbackCause.MISSING


@pytest.mark.parametrize(
    "content",
    [
        '{"results": {"tests": [{"name": "a", "status": "passed"}',  # truncated write
        "not json at all",
        '{"results": {}}',
        '{"results": {"tests": [{"name": "a"}]}}',  # no status
        '{"results": {"tests": []}}',  # nothing reported
        '{"results": {"summary": {"tests": 3}, "tests": [{"name": "a", "status": "passed"}]}}',  # partial
        '{"results": {"tests": [{"name": "a", "status": "passed", "duration": NaN}]}}',
        "[]",
    ],
)
def test_malformed_or_partial_ctrf_is_unparsable_and_falls_back(tmp_path, content):
    (tmp_path / "ctrf.json").write_text(content)
    (tmp_path / "reward.txt").write_text("1")
    report = read_report(tmp_path)
    assert report.fallback is FallbackCause.UNPARSABLE
    assert report.outcomes == ()
    assert "ctrf.json" in report.detail
    assert compute_reward(report, Spec("dense")).value == 1.0  # solved task never scores 0


def test_non_utf8_ctrf_is_unparsable(tmp_path):
    (tmp_path / "ctrf.json").write_bytes(b"\xff\xfe{")
    assert read_report(tmp_path).fallback is FallbackCause.UNPARSABLE


def test_unparsable_ctrf_with_good_junit_uses_junit(real_reports, tmp_path):
    d = copy_only(real_reports, tmp_path / "v", "junit.xml")
    (d / "ctrf.json").write_text("{")
    report = read_report(d)
    assert report.source == "junit" and report.fallback is None and report.total == 6
    assert "ctrf.json" in report.detail


def test_malformed_junit_is_unparsable(tmp_path):
    (tmp_path / "junit.xml").write_text("<testsuites><testsuite><testcase name='a'>")
    assert read_report(tmp_path).fallback is FallbackCause.UNPARSABLE


def test_unknown_ctrf_status_is_a_typed_error_naming_it():
    """CTRF's statuses are passed, failed, skipped, pending, other; anything else is not a CTRF report."""
    with pytest.raises(VerifierReportError, match="'exploded'"):
        parse_ctrf(json.dumps({"results": {"tests": [{"name": "a", "status": "exploded"}]}}))


def test_old_plugin_output_with_only_results_and_pending():
    text = json.dumps(
        {"results": {"tests": [{"name": "a", "status": "pending"}, {"name": "b", "status": "passed"}]}}
    )
    assert [o.status for o in parse_ctrf(text)] == [AssertionStatus.SKIPPED, AssertionStatus.PASSED]


def test_parse_ctrf_raises_typed_error():
    with pytest.raises(VerifierReportError, match="results"):
        parse_ctrf("{}")


def test_reward_json_wins_over_reward_txt(tmp_path):
    (tmp_path / "reward.json").write_text('{"reward": 0.75, "extra": 2}')
    (tmp_path / "reward.txt").write_text("0")
    report = read_report(tmp_path)
    assert report.binary == 0.75 and report.source == "reward.json"


@pytest.mark.parametrize(
    "content",
    ['{"reward": "high"}', '{"reward": null}', '{"reward": 1, "note": "ok"}', '{"reward": {"x": 1}}', '[1]',
     '{}', '{"reward": Infinity}', '{"reward": NaN, "x": 1}', ""],
)  # fmt: skip
def test_reward_json_with_non_numeric_values_is_unparsable(tmp_path, content):
    # Harbor's VerifierResult (dict[str, float | int]) refuses text, null and nested values too; "1", true
    # and a file without a "reward" key are numbers to Harbor (test_reward_json_is_read_as_harbor_reads_it).
    (tmp_path / "reward.json").write_text(content)
    (tmp_path / "reward.txt").write_text("1")  # JSON wins even when bad (Harbor's rule), so this is ignored
    report = read_report(tmp_path)
    assert report.binary is None
    assert report.fallback is FallbackCause.UNPARSABLE
    assert "reward.json" in report.detail
    assert compute_reward(report, Spec("dense")).value is None


@pytest.mark.parametrize("content", ["", "  \n", "yes", "nan", "1 0"])
def test_bad_reward_txt_is_unparsable(tmp_path, content):
    (tmp_path / "reward.txt").write_text(content)
    report = read_report(tmp_path)
    assert report.binary is None and report.fallback is FallbackCause.UNPARSABLE


def test_bad_reward_file_does_not_spoil_a_good_ctrf(real_reports, tmp_path):
    d = copy_only(real_reports, tmp_path / "v", "ctrf.json")
    (d / "reward.json").write_text('{"reward": "high"}')
    report = read_report(d)
    assert report.fallback is None and report.binary is None
    assert compute_reward(report, Spec("dense")).value == pytest.approx(2 / 20)
    assert "reward.json" in report.detail


def test_verifier_timeout_is_tagged_and_partial_outcomes_are_kept(real_reports, tmp_path):
    d = copy_only(real_reports, tmp_path / "v", "ctrf.json")
    report = read_report(d, timed_out=True)
    assert report.fallback is FallbackCause.VERIFIER_TIMEOUT
    assert report.total == 6  # kept for observability
    result = compute_reward(report, Spec("dense"))
    assert result.value is None and result.fallback is FallbackCause.VERIFIER_TIMEOUT


def test_verifier_crash_is_tagged_and_uses_binary(tmp_path):
    (tmp_path / "reward.txt").write_text("1")
    report = read_report(tmp_path, crashed=True)
    assert report.fallback is FallbackCause.VERIFIER_CRASH
    assert compute_reward(report, Spec("dense")).value == 1.0


def test_timeout_takes_precedence_over_crash(tmp_path):
    assert read_report(tmp_path, timed_out=True, crashed=True).fallback is FallbackCause.VERIFIER_TIMEOUT


def test_non_path_argument_is_a_programmer_error():
    with pytest.raises(TypeError):
        read_report(42)  # type: ignore[arg-type]
