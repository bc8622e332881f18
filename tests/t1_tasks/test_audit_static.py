"""Static audit checks: each finds its defect, with evidence naming the file, and the mini pool is clean."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from t1_tasks import load_pool, load_task
from t1_tasks.audit import static_audit
from t1_tasks.validation import CheckRecord, TaskRecord

MINI_TASK = "csv-region-totals"


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    """A fresh copy of a mini task to break."""
    src = load_pool("builtin:mini").get(MINI_TASK).path
    return Path(shutil.copytree(src, tmp_path / "task"))


def _checks(path: Path, record: TaskRecord | None = None) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in static_audit(load_task(path), record).findings:
        out.setdefault(f.check, []).append(f.evidence)
    return out


def test_every_mini_task_passes_the_static_checks():
    pool = load_pool("builtin:mini")
    assert len(pool) == 9
    for task in pool:
        audit = static_audit(task)
        assert audit.findings == (), (task.id, audit.findings)


@pytest.mark.parametrize(
    "line",
    [
        "COPY tests/ /app/tests/",
        "ADD solution /solution",
        'COPY ["tests/test_outputs.py", "/app/"]',
        "COPY --chown=root:root ./solution/solve.sh /app/solve.sh",
        "COPY sales.csv \\\n     test_outputs.py /app/",
    ],
)
def test_dockerfile_copy_of_tests_or_solution_is_leakage(bundle, line):
    dockerfile = bundle / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + line + "\n")
    found = _checks(bundle)
    assert list(found) == ["test_leakage"]
    assert found["test_leakage"][0].startswith("environment/Dockerfile:4:")


def test_dockerfile_copy_of_data_is_not_leakage(bundle):
    # the task's own input is copied into the image; tests/ keeps a held-out copy of it: no leak
    assert (bundle / "tests" / "sales.csv").read_bytes() == (
        bundle / "environment" / "sales.csv"
    ).read_bytes()
    assert _checks(bundle) == {}


def test_renamed_copy_of_a_test_file_in_environment_is_leakage(bundle):
    shutil.copy(bundle / "tests" / "test_outputs.py", bundle / "environment" / "checks.py")
    (evidence,) = _checks(bundle)["test_leakage"]
    assert evidence == "environment/checks.py is a byte copy of tests/test_outputs.py, readable by the agent"


@pytest.mark.parametrize(
    "line",
    [
        "cat /tests/test_outputs.py",
        "sed -i 's/assert/pass #/' test_outputs.py",
        "echo '{}' > /logs/verifier/ctrf.json",
        "rm -rf /logs/verifier",
    ],
)
def test_solution_touching_tests_or_verifier_output_is_a_shortcut(bundle, line):
    solve = bundle / "solution" / "solve.sh"
    n_lines = len(solve.read_text().splitlines())
    solve.write_text(solve.read_text() + line + "\n")
    audit = static_audit(load_task(bundle))
    assert set(audit.hard_rejects) == {"solution_shortcut"}
    assert audit.scores == {"solution_reasonableness": 1}
    assert audit.hard_rejects["solution_shortcut"][0].startswith(f"solution/solve.sh:{n_lines + 1}:")


def test_path_the_tests_require_but_the_instruction_never_names_is_a_candidate(bundle):
    tests = bundle / "tests" / "test_outputs.py"
    tests.write_text(
        tests.read_text() + '\n\ndef test_log():\n    assert Path("/var/log/totals.log").is_file()\n'
    )
    audit = static_audit(load_task(bundle))
    assert audit.hard_rejects == {}  # a candidate lowers a score; the judge decides the hard reject
    assert audit.scores == {"instruction_verifier_alignment": 2}
    (evidence,) = audit.evidence("instruction_verifier_alignment")
    assert evidence.startswith("tests/test_outputs.py:") and "/var/log/totals.log" in evidence


def test_path_named_by_the_environment_is_not_hidden(bundle):
    tests = bundle / "tests" / "test_outputs.py"
    tests.write_text(tests.read_text() + '\n\ndef test_cfg():\n    assert Path("/opt/conf/x.ini").exists()\n')
    assert "instruction_verifier_alignment" in static_audit(load_task(bundle)).scores
    (bundle / "environment" / "Dockerfile").write_text(
        (bundle / "environment" / "Dockerfile").read_text()
        + "RUN mkdir -p /opt/conf && touch /opt/conf/x.ini\n"
    )
    assert static_audit(load_task(bundle)).scores == {}


def _record(oracle: tuple[int, int], nop: tuple[int, int], static: int | None = 4) -> TaskRecord:
    def check(passed_total: tuple[int, int]) -> CheckRecord:
        return CheckRecord(
            passed=passed_total[0], total=passed_total[1], report_source="ctrf", duration_s=1.0
        )

    return TaskRecord(
        id=MINI_TASK, verdict="ok", static_assertions=static, oracle=check(oracle), nop=check(nop)
    )


@pytest.mark.parametrize(
    ("nop", "coverage"),
    [((0, 4), 5), ((1, 4), 4), ((2, 4), 3), ((3, 4), 2)],  # 1 + round(4 * failed / total)
)
def test_coverage_from_the_do_nothing_agent(bundle, nop, coverage):
    audit = static_audit(load_task(bundle), _record((4, 4), nop))
    assert audit.scores == {"solution_correctness": 5, "verifier_coverage": coverage}
    assert audit.hard_rejects == {}


def test_do_nothing_passing_everything_is_a_weak_verifier(bundle):
    audit = static_audit(load_task(bundle), _record((4, 4), (4, 4)))
    assert audit.hard_rejects == {
        "weak_verifier": ["a do-nothing agent passed 4/4 assertions (validation record)"]
    }
    assert audit.scores["verifier_coverage"] == 1


def test_failing_reference_solution_scores_correctness_one(bundle):
    assert static_audit(load_task(bundle), _record((3, 4), (0, 4))).scores["solution_correctness"] == 1
    # every reported assertion passed, but fewer than tests/ define: not correct either
    assert static_audit(load_task(bundle), _record((3, 3), (0, 3))).scores["solution_correctness"] == 1
