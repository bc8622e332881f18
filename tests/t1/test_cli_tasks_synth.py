"""`t1 tasks synth`: bundles that load as pools, a held-out side apart, bad input refused with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from t1.cli import app
from t1.cli_tasks_synth import MAX_BUNDLES
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


def test_an_out_that_is_a_file_or_cannot_be_made_is_named(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for out, heldout, why in [
        (a_file, "0", "is a file, not a folder"),
        (a_file, "1", "is a file, not a folder"),
        (a_file / "below", "0", "cannot create the folder"),
        (Path("/proc/t1-nope"), "0", "cannot create the folder"),
    ]:
        args = ["tasks", "synth", "--family", "text", "--count", "1", "--heldout", heldout, "--out", str(out)]
        res = runner.invoke(app, args)
        assert res.exit_code == 2 and f"--out {out}: {why}" in res.output, res.output
        assert "Errno" not in res.output


def test_the_existing_bundle_message_names_the_option(tmp_path):
    args = ["tasks", "synth", "--family", "text", "--count", "1", "--out", str(tmp_path)]
    res = runner.invoke(app, args)
    assert res.exit_code == 0 and res.output == f"wrote 1 bundle to {tmp_path}\n"
    res = runner.invoke(app, args)
    assert res.exit_code == 2 and "--overwrite" in res.output


def test_count_is_bounded_before_anything_is_drawn(tmp_path):
    out = tmp_path / "pool"
    for count, heldout in ((MAX_BUNDLES + 1, 0), (MAX_BUNDLES, 1), (100_000_000, 0)):
        args = ["--count", str(count), "--heldout", str(heldout), "--out", str(out)]
        res = runner.invoke(app, ["tasks", "synth", "--family", "text", *args])
        assert res.exit_code == 2 and f"at most {MAX_BUNDLES:,} bundles" in res.output, res.output
        assert f"--count {count}" in res.output and not out.exists()


def test_the_cli_reference_gives_the_bound():
    page = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    (row,) = [line for line in page.splitlines() if line.startswith("| `t1 tasks synth")]
    assert f"At most {MAX_BUNDLES:,} bundles a call" in row and "`--out` that is a file" in row
