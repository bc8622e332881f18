"""pytest-json-ctrf 0.3.5's collapsed parametrized entries, read per case from pytest's own output.

``data/ctrf-0.3.5-collapsed-failed.json`` is built by hand in the format of the real 0.3.5 report
(``data/ctrf-0.3.5-parametrized.json``: node id cut at ``[``, ``file_path``, ``retries`` = other cases): a
failed entry of four cases (one failed) and a passed entry of three. Counted per entry, P = 3 (0.15 at
S = 20); pytest's ``-rA`` summary next to it says 6 passed (0.3).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from t1_reward import case_outcomes, check_report, compute_reward, expand_collapsed, read_report
from t1_spec import DenseRewardSpec

DATA = Path(__file__).parent / "data"
REPORT = DATA / "ctrf-0.3.5-collapsed-failed.json"
STDOUT = (DATA / "ctrf-0.3.5-collapsed-failed.stdout.txt").read_text()


def _folder(tmp_path: Path, stdout: str | None = STDOUT) -> Path:
    shutil.copy(REPORT, tmp_path / "ctrf.json")
    if stdout is not None:
        (tmp_path / "test-stdout.txt").write_text(stdout)
    return tmp_path


def test_a_failed_collapsed_entry_counts_its_passing_cases_from_pytest_output(tmp_path):
    report = read_report(_folder(tmp_path))
    assert (report.passed, report.total) == (6, 7)
    assert compute_reward(report, DenseRewardSpec()).value == 0.3
    assert "test_outputs.py::test_sizes[4]" in {o.name for o in report.outcomes if o.status == "failed"}
    assert check_report(report, stdout=STDOUT) == ()  # it agrees with pytest's closing line


def test_without_pytest_output_the_collapsed_entry_stays_a_lower_bound(tmp_path):
    report = read_report(_folder(tmp_path, stdout=None))
    assert (report.passed, report.total) == (3, 7)
    assert compute_reward(report, DenseRewardSpec()).value == 0.15


def test_verbose_lines_give_the_cases_too(tmp_path):
    verbose = "\n".join(
        [f"../tests/test_outputs.py::test_sizes[{n}] PASSED   [ 10%]" for n in (1, 2, 3)]
        + ["../tests/test_outputs.py::test_sizes[4] FAILED   [ 60%]"]
        + [f"../tests/test_outputs.py::test_names[{s}] PASSED   [ 90%]" for s in "abc"]
        + ["========================= 1 failed, 6 passed in 0.05s =========================="]
    )
    assert read_report(_folder(tmp_path, verbose)).passed == 6


def test_output_that_does_not_account_for_every_case_is_not_used(tmp_path):
    partial = STDOUT.replace("PASSED ../tests/test_outputs.py::test_sizes[3]\n", "")
    report = read_report(_folder(tmp_path, partial))
    assert report.passed == 3  # test_sizes stays collapsed (3 cases named, 4 reported); test_names expands


def test_output_that_contradicts_the_entry_is_not_used(tmp_path):
    # every case "passed" although the entry failed: the output is not the report's run
    forged = STDOUT.replace("FAILED ../tests/test_outputs.py::test_sizes[4] - assert 4 < 4", "")
    case = "PASSED ../tests/test_outputs.py::test_sizes"
    forged = forged.replace(f"{case}[3]", f"{case}[3]\n{case}[4]")
    assert read_report(_folder(tmp_path, forged)).passed == 3


def test_only_the_last_summary_section_is_read():
    # a test's captured output echoed by -rA comes before pytest's own summary section
    planted = "=== short test summary info ===\nPASSED t.py::test_a[1]\nPASSED t.py::test_a[2]\n"
    real = "==== short test summary info ====\nFAILED t.py::test_a[1] - x\nPASSED t.py::test_a[2]\n"
    assert case_outcomes(planted + real) == {"t.py::test_a[1]": "failed", "t.py::test_a[2]": "passed"}


def test_a_forged_pass_line_that_fits_the_entry_is_caught_by_the_closing_line(tmp_path):
    # the program under test can print lines, but pytest's closing line still counts 6 passed
    forged = STDOUT.replace("FAILED ../tests/test_outputs.py::test_sizes[4] - assert 4 < 4",
                            "PASSED ../tests/test_outputs.py::test_sizes[4]\n"
                            "FAILED ../tests/test_outputs.py::test_sizes[1] - x")  # fmt: skip
    forged = forged.replace("PASSED ../tests/test_outputs.py::test_sizes[1]\n", "")
    report = read_report(_folder(tmp_path, forged))
    assert report.passed == 6  # still one failed case: the closing line agrees, nothing gained
    assert expand_collapsed(report, None) is report
