"""The validation record: round-trips through JSON, refuses other versions by name, says what it holds."""

import datetime
import json

import pytest

from t1_tasks import RECORD_VERSION, ValidationRecord, ValidationRecordError, read_record, write_record
from t1_tasks.validation import CheckRecord, TaskRecord


def _record() -> ValidationRecord:
    oracle = CheckRecord(passed=5, total=5, report_source="ctrf", solve_s=0.2, verifier_s=1.5, duration_s=3.0)
    nop = CheckRecord(
        passed=1,
        total=5,
        report_source="junit",
        verifier_s=1.2,
        duration_s=2.0,
        failed_assertions=("t.py::a", "t.py::b", "t.py::c", "t.py::d"),
    )
    binary = CheckRecord(
        passed=0, total=0, report_source="reward.txt", verifier_s=1.0, duration_s=2.0, error="no report"
    )
    return ValidationRecord(
        pool="/tmp/pool",
        created=datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
        t1_version="0.1.0",
        duration_s=12.5,
        tasks=(
            TaskRecord(
                id="a",
                verdict="ok",
                category="c",
                difficulty="easy",
                static_assertions=5,
                oracle=oracle,
                nop=nop,
            ),
            TaskRecord(id="b", verdict="failed", problems=("oracle: no report",), oracle=binary, nop=binary),
            TaskRecord(id="c", verdict="broken", problems=("task.toml: missing",)),
        ),
    )


def test_record_round_trips_through_its_json_file(tmp_path):
    record = _record()
    path = write_record(record, tmp_path / "deep" / "r.json")
    assert read_record(path) == record
    data = json.loads(path.read_text())
    assert data["version"] == RECORD_VERSION == "t1-validation/v1"
    assert data["tasks"][0]["nop"]["passed"] == 1  # the do-nothing result, for the audit


def test_record_says_which_tasks_emit_a_per_assertion_report():
    a, b, c = _record().tasks
    assert a.oracle.per_assertion_report and a.nop.per_assertion_report
    assert not b.oracle.per_assertion_report and c.oracle is None
    assert (a.observed_assertions, b.observed_assertions, c.observed_assertions) == (5, None, None)
    assert not _record().ok


@pytest.mark.parametrize("version", ["t1-validation/v2", None])
def test_a_record_of_another_version_is_refused_by_name(tmp_path, version):
    data = json.loads(_record().model_dump_json())
    if version is None:
        del data["version"]
    else:
        data["version"] = version
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValidationRecordError, match=f"version {version!r} is not supported") as err:
        read_record(path)
    assert str(path) in str(err.value) and RECORD_VERSION in str(err.value)


def test_bad_fields_and_bad_json_name_the_file(tmp_path):
    data = json.loads(_record().model_dump_json())
    data["tasks"][0]["oracle"]["passed"] = -1
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValidationRecordError, match=r"r\.json.*tasks\.0\.oracle\.passed"):
        read_record(path)
    path.write_text("{not json")
    with pytest.raises(ValidationRecordError, match="not JSON"):
        read_record(path)
    with pytest.raises(ValidationRecordError, match="cannot read"):
        read_record(tmp_path / "absent.json")
