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


def test_runs_started_together_in_one_second_get_their_own_directories(tmp_path, monkeypatch):
    """Many processes of one recipe (a benchmark's arms) racing for one name: mkdir decides, none shares."""
    import threading
    import time as time_module

    monkeypatch.setattr(time_module, "strftime", lambda *a: "20260101-000000")
    barrier = threading.Barrier(8)
    roots: list = []

    def start() -> None:
        barrier.wait()
        roots.append(RunDir.create(tmp_path, "tiny", {"name": "tiny"}).root)

    threads = [threading.Thread(target=start) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(roots)) == 8 and all((r / "recipe.yaml").is_file() for r in roots)
