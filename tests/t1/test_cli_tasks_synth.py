"""`t1 tasks synth`: bundles that load as pools, a held-out side apart, bad input refused with exit 2."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from t1.cli import app
from t1_tasks import load_pool

runner = CliRunner()


def test_writes_count_bundles_that_load_as_a_pool(tmp_path):
    res = runner.invoke(app, ["tasks", "synth", "--family", "csv", "--count", "4", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    pool = load_pool(str(tmp_path), require_solution=True)
    assert [t.id for t in pool.tasks] == [f"synth-csv-{s:05d}" for s in range(4)]


def test_heldout_side_is_written_apart_and_listed(tmp_path):
    args = ["tasks", "synth", "--family", "text", "--family", "files", "--count", "4", "--heldout", "2"]
    res = runner.invoke(app, [*args, "--seed", "5", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    train = {t.id for t in load_pool(str(tmp_path / "train")).tasks}
    held = {t.id for t in load_pool(str(tmp_path / "heldout")).tasks}
    assert len(train) == 4 and len(held) == 2 and not train & held
    manifest = json.loads((tmp_path / "split.json").read_text())
    assert {r["task"] for r in manifest["heldout"]} == held


def test_unknown_family_and_existing_bundle_exit_2(tmp_path):
    res = runner.invoke(app, ["tasks", "synth", "--family", "nope", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "unknown; known are csv, files, text" in res.output
    args = ["tasks", "synth", "--family", "text", "--count", "1", "--out", str(tmp_path)]
    assert runner.invoke(app, args).exit_code == 0
    res = runner.invoke(app, args)
    assert res.exit_code == 2 and "already there" in res.output
    assert runner.invoke(app, [*args, "--overwrite"]).exit_code == 0
