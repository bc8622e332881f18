"""`t1 tasks overlap TRAIN EVAL...`: near-duplicate pairs as a table or JSON (T1 §3).

Exit 0 when the pools are disjoint, 1 when a pair is found or a bundle is broken, 2 for bad input.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from t1.cli import app
from t1_spec import PoolSpec
from t1_tasks import load_pool
from t1_tasks.pool import builtin_pool_dir

runner = CliRunner()
MINI = builtin_pool_dir("mini")


def _near_copy(root: Path) -> Path:
    """A pool holding a copy of wordfreq-script with two words of its instruction changed."""
    copy = root / "heldout" / "word-counts"
    shutil.copytree(MINI / "wordfreq-script", copy)
    text = (copy / "instruction.md").read_text()
    (copy / "instruction.md").write_text(text.replace("most frequent", "commonest"))
    return copy.parent


def _disjoint(root: Path) -> Path:
    """A pool of one task whose instruction and tests share no word 5-gram with any mini task."""
    task = root / "other" / "haiku"
    shutil.copytree(MINI / "csv-region-totals", task)
    (task / "instruction.md").write_text(
        "Compose a haiku about autumn leaves and save it as poem.txt here.\n"
    )
    (task / "tests" / "test_outputs.py").write_text(
        "def test_poem_is_there():\n    assert open('poem.txt')\n"
    )
    return task.parent


def test_the_pool_against_itself_lists_every_task_and_exits_1():
    result = runner.invoke(app, ["tasks", "overlap", "builtin:mini", "builtin:mini"])
    assert result.exit_code == 1, result.output
    for task in load_pool("builtin:mini"):
        assert any(
            line.split()[:3] == [task.id, "builtin:mini", task.id] for line in result.output.splitlines()
        )
    assert "9 pairs at Jaccard >= 0.8" in result.output


def test_a_near_copy_is_one_row_and_json_holds_pairs_threshold_and_counts(tmp_path):
    heldout = _near_copy(tmp_path)
    result = runner.invoke(app, ["tasks", "overlap", "builtin:mini", str(heldout)])
    assert result.exit_code == 1, result.output
    (row,) = [line for line in result.output.splitlines() if "word-counts" in line]
    assert row.split()[0] == "wordfreq-script"
    result = runner.invoke(app, ["tasks", "overlap", "builtin:mini", str(heldout), "--json"])
    assert result.exit_code == 1, result.output
    body = json.loads(result.output)
    assert body["threshold"] == PoolSpec.model_fields["max_eval_overlap"].default
    assert body["counts"] == {
        "train_tasks": 9,
        "eval_tasks": {str(heldout): 1},
        "pairs": 1,
        "train_tasks_overlapping": 1,
    }
    (pair,) = body["pairs"]
    assert (pair["train_task"], pair["eval_task"], pair["eval_source"]) == (
        "wordfreq-script",
        "word-counts",
        str(heldout),
    )
    assert pair["exact_jaccard"] >= 0.8 and pair["parts"] in ("tests", "both")


def test_json_pairs_are_sorted_by_exact_jaccard(tmp_path):
    heldout = _near_copy(tmp_path)
    result = runner.invoke(
        app,
        ["tasks", "overlap", "builtin:mini", "builtin:mini", str(heldout), "--threshold", "0.01", "--json"],
    )
    pairs = json.loads(result.output)["pairs"]
    values = [p["exact_jaccard"] for p in pairs]
    assert len(pairs) > 10 and values == sorted(values, reverse=True)
    assert all(v >= 0.01 for v in values)


def test_a_disjoint_pool_exits_0(tmp_path):
    result = runner.invoke(app, ["tasks", "overlap", "builtin:mini", str(_disjoint(tmp_path))])
    assert result.exit_code == 0, result.output
    assert "0 pairs" in result.output and "disjoint" in result.output
    result = runner.invoke(
        app, ["tasks", "overlap", "builtin:mini", str(_disjoint(tmp_path / "b")), "--json"]
    )
    assert result.exit_code == 0 and json.loads(result.output)["pairs"] == []


def test_a_broken_bundle_in_an_evaluation_pool_is_named_and_exits_1(tmp_path):
    heldout = _disjoint(tmp_path)
    (heldout / "broken" / "tests").mkdir(parents=True)
    result = runner.invoke(app, ["tasks", "overlap", "builtin:mini", str(heldout)])
    assert result.exit_code == 1, result.output
    assert "broken" in result.output and "task.toml" in result.output


def test_bad_input_exits_2(tmp_path):
    for args in (
        ["builtin:mini", "/nonexistent/pool"],
        ["builtin:nope", "builtin:mini"],
        ["builtin:mini", "builtin:mini", "--threshold", "0"],
        ["builtin:mini", "builtin:mini", "--threshold", "1.5"],
        ["builtin:mini"],
    ):
        result = runner.invoke(app, ["tasks", "overlap", *args])
        assert result.exit_code == 2, (args, result.output)
