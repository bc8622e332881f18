"""The audit on a pool: the deliberately broken pool is rejected task by task for the right reason, the mini
pool is admitted, a run's pool is filtered by its audit file, and ``t1 tasks audit`` writes and exits as
documented."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from t1.cli import app
from t1_spec import PoolAuditSpec
from t1_tasks import load_pool, read_record
from t1_tasks.audit import AuditFileError, admitted_tasks, audit_pool, read_audit, write_audit
from t1_tasks.validation import CheckRecord, TaskRecord, ValidationRecord

BROKEN = Path(__file__).parent / "fixtures" / "broken_pool"
RECORD = (
    BROKEN / "validation.json"
)  # written by `t1 tasks validate tests/t1_tasks/fixtures/broken_pool --record`

# task -> (the hard rejects it must get, the dimensions that must fall below their critical minimum)
EXPECTED = {
    "hidden-requirement": (set(), {"instruction_verifier_alignment"}),
    "leaked-tests": ({"test_leakage"}, set()),
    "shortcut-solution": ({"solution_shortcut"}, {"solution_reasonableness"}),
    "weak-verifier": ({"weak_verifier"}, {"verifier_coverage"}),
}


@pytest.fixture(scope="module")
def broken_rows():
    return {r.task_id: r for r in audit_pool(load_pool(BROKEN), record=read_record(RECORD))}


def test_every_broken_task_is_rejected_for_its_own_reason(broken_rows):
    assert set(broken_rows) == set(EXPECTED)
    for task_id, (rejects, below) in EXPECTED.items():
        row = broken_rows[task_id]
        assert not row.admitted, task_id
        assert set(row.hard_rejects) == rejects, task_id
        assert set(row.critical_failures) == below, task_id
        # the reference solution passes every assertion in all four: they fail for their defect alone
        assert row.scores["solution_correctness"].score == 5, task_id


def test_rejections_carry_evidence_naming_the_file(broken_rows):
    assert "tests/test_outputs.py:" in broken_rows["hidden-requirement"].reasons[0]
    assert "/app/region_totals.json" in broken_rows["hidden-requirement"].reasons[0]
    leak = [r.evidence for r in broken_rows["leaked-tests"].hard_rejects["test_leakage"]]
    assert leak[0].startswith("environment/Dockerfile:4: COPY test_outputs.py")
    assert leak[1].startswith("environment/test_outputs.py")
    (shortcut,) = broken_rows["shortcut-solution"].hard_rejects["solution_shortcut"]
    assert (
        shortcut.evidence.startswith("solution/solve.sh:")
        and "/logs/verifier/reward.json" in shortcut.evidence
    )
    (weak,) = broken_rows["weak-verifier"].hard_rejects["weak_verifier"]
    assert weak.evidence == "a do-nothing agent passed 2/2 assertions (validation record)"


def test_static_audit_of_the_mini_pool_has_no_hard_reject():
    rows = audit_pool(load_pool("builtin:mini"))
    assert len(rows) == 9
    assert all(r.admitted and not r.hard_rejects and not r.critical_failures for r in rows)


def test_audit_file_round_trips_and_filters_a_pool(tmp_path, broken_rows):
    pool = load_pool(BROKEN)
    path = write_audit(list(broken_rows.values()), tmp_path / "audit.jsonl")
    assert read_audit(path) == broken_rows
    assert len(admitted_tasks(pool, PoolAuditSpec(file=str(path)))) == 0
    mini = load_pool("builtin:mini")
    mini_file = write_audit(audit_pool(mini), tmp_path / "mini.jsonl")
    kept = admitted_tasks(mini, PoolAuditSpec(file=str(mini_file), min_score=5))
    assert [t.id for t in kept] == [t.id for t in mini]  # nothing scored: admitted on the hard rejects alone


def _record_for(task_id: str, nop_passed: int) -> ValidationRecord:
    def check(passed: int) -> CheckRecord:
        return CheckRecord(passed=passed, total=4, report_source="ctrf", duration_s=1.0)

    row = TaskRecord(id=task_id, verdict="ok", static_assertions=4, oracle=check(4), nop=check(nop_passed))
    return ValidationRecord(
        pool="builtin:mini", created=datetime.now(UTC), t1_version="0", duration_s=1, tasks=(row,)
    )


def test_min_score_of_the_spec_is_applied_not_the_audits(tmp_path):
    pool = load_pool("builtin:mini", limit=1)  # csv-region-totals, 4 assertions
    (row,) = audit_pool(pool, record=_record_for(pool.tasks[0].id, nop_passed=2), min_score=1.0)
    # correctness 5, coverage 1 + round(4 * 2/4) = 3: (0.15 * 5 + 0.10 * 3) / 0.25 = 4.2
    assert row.quality_score == pytest.approx(4.2) and row.quality_partial and row.scored_weight == 0.25
    path = write_audit([row], tmp_path / "a.jsonl")
    assert len(admitted_tasks(pool, PoolAuditSpec(file=str(path), min_score=4.0))) == 1
    assert len(admitted_tasks(pool, PoolAuditSpec(file=str(path), min_score=4.5))) == 0


def test_a_task_missing_from_the_audit_file_refuses_the_run(tmp_path):
    pool = load_pool("builtin:mini")
    path = write_audit(audit_pool(load_pool("builtin:mini", limit=2)), tmp_path / "a.jsonl")
    with pytest.raises(
        AuditFileError, match=r"no row for tasks fix-backup-script, .* of pool builtin:mini"
    ) as e:
        admitted_tasks(pool, PoolAuditSpec(file=str(path)))
    assert str(path) in str(e.value)


def test_audit_file_of_another_version_is_refused(tmp_path):
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps({"version": "t1-audit/v0", "task_id": "x"}) + "\n")
    with pytest.raises(AuditFileError, match=r"old.jsonl:1: row version 't1-audit/v0' is not supported"):
        read_audit(path)


runner = CliRunner()


def test_cli_rejects_the_broken_pool_with_exit_1_and_writes_jsonl(tmp_path):
    out = tmp_path / "audit.jsonl"
    result = runner.invoke(
        app, ["tasks", "audit", str(BROKEN), "--validated", str(RECORD), "--out", str(out)]
    )
    assert result.exit_code == 1, result.output
    assert "4 of 4 tasks rejected" in result.output
    lines = out.read_text().splitlines()
    assert [json.loads(line)["task_id"] for line in lines] == sorted(EXPECTED)
    assert all(json.loads(line)["admitted"] is False for line in lines)


def test_cli_admits_the_mini_pool_and_prints_json():
    result = runner.invoke(app, ["tasks", "audit", "builtin:mini", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert (summary["tasks"], summary["admitted"], summary["rejected"]) == (9, 9, [])
    assert summary["min_score"] == 3.0 and len(summary["rows"]) == 9


def test_cli_judge_without_a_model_is_invalid_input(monkeypatch):
    monkeypatch.delenv("T1_JUDGE_MODEL", raising=False)
    result = runner.invoke(app, ["tasks", "audit", "builtin:mini", "--judge"])
    assert result.exit_code == 2
