import json
import math

from t1.run.run_dir import RunDir


def test_metrics_lines_are_strict_json(tmp_path):
    run = RunDir.create(tmp_path, "r", {"name": "r"})
    run.append_metrics({"ev": math.nan, "nested": {"x": math.inf}, "ok": 1.5, "list": [1, math.nan]})
    line = run.metrics_path.read_text().strip()
    assert json.loads(line) == {"ev": None, "nested": {"x": None}, "ok": 1.5, "list": [1, None]}
    assert "NaN" not in line


def test_run_directory_layout_and_resolved_recipe(tmp_path):
    run = RunDir.create(tmp_path, "tiny", {"name": "tiny", "seed": 0})
    assert (run.root / "recipe.yaml").read_text().startswith("name: tiny")
    assert {p.name for p in run.root.iterdir()} == {"recipe.yaml", "trajectories", "verifier"}
    again = RunDir.create(tmp_path, "tiny", {"name": "tiny", "seed": 0})
    assert again.root != run.root  # two runs in the same second never share a directory
