"""A report is folded once on its way to the reward; the counts read off it equal the folded ones (T1 §5.2).

P and T (Eq. 20) count each test name once, at its last entry's status. The expected values here come from
an independent grouping written in the test (last entry per name, entries summed), never from the code
under test.
"""

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

import t1_reward.outcomes as outcomes_module
import t1_reward.report as report_module
from t1_reward import (
    AssertionOutcome,
    AssertionStatus,
    Report,
    fold_outcomes,
    parse_ctrf,
    score_output,
)
from t1_spec import DenseRewardSpec

_OUTCOMES = st.lists(
    st.builds(
        AssertionOutcome,
        name=st.sampled_from(["a", "b", "c", "d"]),
        status=st.sampled_from(list(AssertionStatus)),
        message=st.none() | st.sampled_from(["m1", "m2"]),
        entries=st.integers(1, 3),
        cases=st.integers(1, 4),
    ),
    max_size=12,
).map(tuple)


def _expected(entries: tuple[AssertionOutcome, ...]) -> dict[str, int]:
    """P, T, duplicates and collapsed by hand: the last entry of each name, entries summed."""
    last: dict[str, AssertionOutcome] = {}
    for o in entries:
        last[o.name] = o
    return {
        "passed": sum(o.cases for o in last.values() if o.status == "passed"),
        "total": sum(o.cases for o in last.values()),
        "duplicates": sum(o.entries for o in entries) - len(last),
        "collapsed": sum(1 for o in last.values() if o.cases > 1),
    }


@given(_OUTCOMES)
def test_counts_of_a_hand_built_report_equal_the_folded_ones(entries):
    report = Report(entries, None, "ctrf", None)
    folded = Report(fold_outcomes(entries), None, "ctrf", None)
    want = _expected(entries)
    for r in (report, folded):
        got = {k: getattr(r, k) for k in ("passed", "total", "duplicates", "collapsed")}
        assert got == want


@given(_OUTCOMES)
def test_fold_keeps_first_appearance_order_and_the_last_entrys_status(entries):
    folded = fold_outcomes(entries)
    names = list(dict.fromkeys(o.name for o in entries))
    assert [o.name for o in folded] == names
    for o in folded:
        same = [e for e in entries if e.name == o.name]
        assert (o.status, o.message, o.cases) == (same[-1].status, same[-1].message, same[-1].cases)
        assert o.entries == sum(e.entries for e in same)
    assert fold_outcomes(folded) == folded


def test_a_report_without_repeats_is_returned_as_it_is_not_rebuilt():
    entries = (AssertionOutcome("a", AssertionStatus.PASSED), AssertionOutcome("b", AssertionStatus.FAILED))
    assert fold_outcomes(entries) is entries


def test_the_counts_are_taken_once_per_report():
    report = Report((AssertionOutcome("a", AssertionStatus.PASSED),), None, "ctrf", None)
    assert report.counts is report.counts
    assert (report.passed, report.total) == (1, 1)


def _ctrf_folder(tmp_path: Path) -> Path:
    tests = [{"name": f"t.py::test_{i}", "status": "passed" if i % 3 else "failed"} for i in range(30)]
    tests.append({"name": "t.py::test_0", "status": "passed"})  # a rerun of test_0 that passed
    (tmp_path / "ctrf.json").write_text(json.dumps({"results": {"tests": tests}}))
    return tmp_path


def test_scoring_a_ctrf_folder_folds_its_outcomes_at_most_once(tmp_path, monkeypatch):
    calls = []

    def counted(outcomes):
        calls.append(len(outcomes))
        return fold_outcomes(outcomes)

    monkeypatch.setattr(report_module, "fold_outcomes", counted)
    monkeypatch.setattr(outcomes_module, "fold_outcomes", counted)
    report, verdict = score_output(_ctrf_folder(tmp_path), DenseRewardSpec())
    # 30 names, test_0 passed on its rerun: 20 + 1 passed of 30; one entry folded away
    assert (verdict.reward.passed, verdict.reward.total, verdict.reward.duplicates) == (21, 30, 1)
    assert verdict.reward.value == 21 / 20
    assert len(calls) <= 1


def test_a_name_in_two_files_is_two_tests_and_a_repeat_in_one_file_is_one():
    doc = {
        "results": {
            "tests": [
                {"name": "works", "status": "passed", "filePath": "a.spec.js"},
                {"name": "works", "status": "failed", "filePath": "b.spec.js"},
                {"name": "retried", "status": "failed", "filePath": "a.spec.js"},
                {"name": "retried", "status": "passed", "filePath": "a.spec.js"},
            ]
        }
    }
    names = [o.name for o in parse_ctrf(json.dumps(doc))]
    assert names == ["a.spec.js::works", "b.spec.js::works", "retried", "retried"]
