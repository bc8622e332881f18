"""`t1 reward`: a verifier folder's outcomes and its reward under each kind, as a user sees them."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from t1.cli import app

DATA = Path(__file__).resolve().parents[1] / "t1_reward" / "data"


def _json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_0_3_5_report_prints_every_case_and_each_kinds_reward(tmp_path):
    # The real pytest-json-ctrf 0.3.5 report: P = 7, T = 10 (tests/t1_reward/test_tool_semantics.py); with
    # reward.txt = 0 (pytest failed): dense 7/20, ratio max(0, 0.4 * 7/10) = 0.28, binary 0.
    (tmp_path / "ctrf.json").write_bytes((DATA / "ctrf-0.3.5-parametrized.json").read_bytes())
    (tmp_path / "reward.txt").write_text("0\n")
    out = _json(CliRunner().invoke(app, ["reward", str(tmp_path), "--json"]))
    assert (out["passed"], out["total"], out["kind"], out["fallback"]) == (7, 10, "dense", None)
    assert out["reward"] == 7 / 20
    assert out["rewards"]["ratio"]["reward"] == 0.4 * 7 / 10 and out["rewards"]["binary"]["reward"] == 0.0
    assert out["collapsed"] == 3 and {o["cases"] for o in out["outcomes"]} == {1, 2, 3, 4}
    text = CliRunner().invoke(app, ["reward", str(tmp_path)])
    assert text.exit_code == 0
    assert "P = 7, T = 10" in text.output and "x4" in text.output and "0.35" in text.output
    assert "[dense]" in text.output and "[ratio]" in text.output


def test_scale_changes_only_the_dense_reward(tmp_path):
    (tmp_path / "ctrf.json").write_text(
        json.dumps({"results": {"tests": [{"name": f"t{i}", "status": "passed"} for i in range(3)]}})
    )
    out = _json(CliRunner().invoke(app, ["reward", str(tmp_path), "--json", "--scale", "4"]))
    assert out["reward"] == 3 / 4 and out["scale"] == 4
    assert out["rewards"]["binary"]["reward"] == 1.0  # derived: something passed, nothing failed
    assert CliRunner().invoke(app, ["reward", str(tmp_path), "--scale", "0"]).exit_code == 2


def test_a_reward_file_alone_is_the_binary_fallback_and_says_so(tmp_path):
    (tmp_path / "reward.json").write_text('{"reward": 1, "n_passed": 3}')
    out = _json(CliRunner().invoke(app, ["reward", str(tmp_path), "--json", "--kind", "ratio"]))
    assert (out["reward"], out["kind"], out["fallback"], out["total"]) == (
        1.0,
        "binary_fallback",
        "missing",
        0,
    )


def test_nothing_usable_prints_a_null_reward(tmp_path):
    (tmp_path / "test-stdout.txt").write_text("curl: (6) Could not resolve host: astral.sh\n")
    out = _json(CliRunner().invoke(app, ["reward", str(tmp_path), "--json"]))
    assert (out["reward"], out["kind"], out["fallback"]) == (None, "none", "missing")


def test_a_missing_folder_an_empty_one_and_a_file_are_clear_errors(tmp_path):
    missing = CliRunner().invoke(app, ["reward", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "does not exist" in missing.output
    (tmp_path / "empty").mkdir()
    empty = CliRunner().invoke(app, ["reward", str(tmp_path / "empty")])
    assert empty.exit_code == 2 and "is empty" in empty.output and "ctrf.json" in empty.output
    (tmp_path / "f").write_text("1")
    assert CliRunner().invoke(app, ["reward", str(tmp_path / "f")]).exit_code == 2
    bad_kind = CliRunner().invoke(app, ["reward", str(tmp_path), "--kind", "grpo"])
    assert bad_kind.exit_code == 2 and "dense, ratio, binary" in bad_kind.output
