"""An audit and a validation record bind to the pool they were taken on.

A task changed after its audit, or another pool's record, is refused, never silently admitted.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from t1_spec import PoolAuditSpec
from t1_tasks import bundle_digest, load_pool, read_record, record_for, suggested_scale
from t1_tasks.audit import AuditFileError, admitted_tasks, audit_pool, write_audit

MINI = Path(__file__).resolve().parents[2] / "packages/t1-tasks/src/t1_tasks/pools/mini"
BROKEN = Path(__file__).resolve().parent / "fixtures" / "broken_pool"


@pytest.fixture
def pool_copy(tmp_path: Path) -> Path:
    root = tmp_path / "pool"
    for name in ("csv-region-totals", "fix-permissions"):
        shutil.copytree(MINI / name, root / name)
    return root


def test_bundle_digest_changes_with_any_file_and_only_then(pool_copy: Path) -> None:
    task = pool_copy / "csv-region-totals"
    before = bundle_digest(task)
    assert bundle_digest(task) == before
    (task / "environment" / "extra.txt").write_text("x")
    assert bundle_digest(task) != before


def test_a_task_changed_after_its_audit_is_refused_by_the_run(pool_copy: Path, tmp_path: Path) -> None:
    audit_file = tmp_path / "audit.jsonl"
    write_audit(audit_pool(load_pool(pool_copy)), audit_file)
    spec = PoolAuditSpec(file=str(audit_file))
    assert len(admitted_tasks(load_pool(pool_copy), spec)) == 2
    # the attack: leak the tests into the image after the audit admitted the task
    task = pool_copy / "csv-region-totals"
    shutil.copy(task / "tests" / "test_outputs.py", task / "environment" / "test_outputs.py")
    with (task / "environment" / "Dockerfile").open("a") as fh:
        fh.write("COPY test_outputs.py /app/test_outputs.py\n")
    with pytest.raises(AuditFileError, match="csv-region-totals .*changed since the audit"):
        admitted_tasks(load_pool(pool_copy), spec)


def test_a_validation_record_of_another_pool_is_refused() -> None:
    record = read_record(BROKEN / "validation.json")
    pool = load_pool("builtin:mini")
    with pytest.raises(ValueError, match="validation record of pool"):
        record_for(record, pool.source, [t.id for t in pool.tasks])
    broken = load_pool(BROKEN)
    assert record_for(record, str(BROKEN), [t.id for t in broken.tasks]) is record


@pytest.mark.parametrize(("p90", "want"), [(24.000000000000004, 24), (24.0, 24), (24.01, 25), (0.2, 1)])
def test_suggested_scale_is_not_pushed_up_by_float_noise(p90: float, want: int) -> None:
    assert suggested_scale(p90) == want


def test_a_shortcut_in_a_helper_the_solution_runs_is_found(pool_copy: Path) -> None:
    from t1_tasks import load_task
    from t1_tasks.audit import static_audit

    task_dir = pool_copy / "csv-region-totals"
    (task_dir / "solution" / "helper.py").write_text(
        "import json\nv = 'verif'\njson.dump({'reward': 1}, open(f'/logs/{v}ier/reward.json', 'w'))\n"
    )
    with (task_dir / "solution" / "solve.sh").open("a") as fh:
        fh.write("python3 /solution/helper.py\n")
    audit = static_audit(load_task(task_dir), None)
    assert "solution_shortcut" in audit.hard_rejects
    assert any("helper.py" in e for e in audit.hard_rejects["solution_shortcut"])
