"""`tools/compare_runs.py`: two run directories agree on every value of every metrics row but times."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("compare_runs", ROOT / "tools" / "compare_runs.py")
compare_runs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare_runs)


def _run(tmp_path: Path, name: str, rows: list[dict]) -> Path:
    run = tmp_path / name
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_times_differ_and_the_runs_still_agree(tmp_path, capsys):
    a = _run(tmp_path, "a", [{"step": 0, "loss": 0.5, "wall_s": {"step": 1.0}, "trainer/step_time_s": 2.0}])
    b = _run(tmp_path, "b", [{"step": 0, "loss": 0.5, "wall_s": {"step": 9.0}, "trainer/step_time_s": 7.0}])
    assert compare_runs.main([str(a), str(b)]) == 0
    assert "identical" in capsys.readouterr().out


def test_a_changed_value_a_missing_key_and_a_missing_row_are_each_named(tmp_path, capsys):
    a = _run(tmp_path, "a", [{"step": 0, "x": {"y": [1, 2]}, "k": 1}, {"step": 1}])
    b = _run(tmp_path, "b", [{"step": 0, "x": {"y": [1, 3]}}])
    assert compare_runs.main([str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "2 rows in A, 1 in B" in out
    assert "row 1 (None step 0).x.y[1]: A 2, B 3" in out
    assert "keys only in A ['k']" in out


def test_an_int_is_not_a_float_and_ignored_keys_are_said(tmp_path, capsys):
    a = _run(tmp_path, "a", [{"n": 1, "tail": 1}])
    b = _run(tmp_path, "b", [{"n": 1.0, "tail": 2}])
    assert compare_runs.main([str(a), str(b), "--ignore", "tail"]) == 1
    assert "A 1, B 1.0" in capsys.readouterr().out
