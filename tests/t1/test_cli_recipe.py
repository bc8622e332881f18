"""`t1 recipe validate|show|schema|diff`: output, exit codes, errors on stderr without a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from t1.cli import app
from t1_spec import load_recipe

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "recipes" / "tiny-cpu.yaml")
GRPO = str(ROOT / "recipes" / "grpo.yaml")

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, ["recipe", *args])


def test_validate_accepts_the_tiny_recipe() -> None:
    res = run("validate", TINY)
    assert res.exit_code == 0, res.output
    assert "valid" in res.stdout and "tiny-cpu" in res.stdout


def test_validate_prints_paper_departures_as_notes() -> None:
    # a cluster ablation: valid, so --spec-only exits 0; its preflight (exit 1 here): see test_preflight
    res = run("validate", str(ROOT / "recipes" / "no-r3.yaml"), "--spec-only")
    assert res.exit_code == 0, res.output
    assert "ppo.routing_replay" in res.stdout


def test_invalid_recipe_exits_2_with_field_on_stderr_and_no_traceback() -> None:
    res = run("validate", TINY, "ppo.batch_size=6")
    assert res.exit_code == 2
    assert "rollout.admitted" in res.stderr and "tiny-cpu.yaml" in res.stderr
    assert "Traceback" not in res.output
    assert res.stdout == ""


def test_debug_prints_a_traceback_and_still_exits_2_on_invalid_input() -> None:
    res = run("validate", TINY, "ppo.batch_size=6", "--debug")
    assert res.exit_code == 2
    assert "Traceback (most recent call last)" in res.stderr and "RecipeError" in res.stderr


def test_missing_file_exits_2(tmp_path) -> None:
    res = run("validate", str(tmp_path / "none.yaml"))
    assert res.exit_code == 2
    assert "not found" in res.stderr


def test_show_prints_the_resolved_recipe_with_defaults() -> None:
    res = run("show", GRPO)
    assert res.exit_code == 0, res.output
    shown = yaml.safe_load(res.stdout)
    assert shown["ppo"]["advantage"] == {"estimator": "grpo", "group_size": 8}
    assert shown["ppo"]["clip_eps"] == 0.2  # inherited from t1-122b
    assert shown["logging"]["run_root"] == "runs"  # a default
    assert shown == json.loads(json.dumps(shown))  # plain data only


def test_show_applies_overrides_and_round_trips(tmp_path) -> None:
    res = run("show", TINY, "ppo.steps=7")
    assert res.exit_code == 0
    p = tmp_path / "shown.yaml"
    p.write_text(res.stdout, encoding="utf-8")
    assert load_recipe(p).ppo.steps == 7


def test_show_json() -> None:
    res = run("show", TINY, "--json")
    assert json.loads(res.stdout)["schema"] == "t1/v1"


def test_schema_prints_the_recipe_schema() -> None:
    res = run("schema")
    assert res.exit_code == 0
    schema = json.loads(res.stdout)
    assert schema["properties"]["schema"]["const"] == "t1/v1"


def test_schema_section() -> None:
    res = run("schema", "--section", "plan")
    assert "token_wall" in json.loads(res.stdout)["properties"]
    bad = run("schema", "--section", "nope")
    assert bad.exit_code == 2 and "nope" in bad.stderr


def test_schema_out_writes_files_matching_the_committed_ones(tmp_path) -> None:
    res = run("schema", "--out", str(tmp_path))
    assert res.exit_code == 0
    written = sorted(p.name for p in tmp_path.iterdir())
    assert "recipe.schema.json" in written and "plan.schema.json" in written
    for name in written:
        assert (tmp_path / name).read_text() == (ROOT / "specs" / "v1" / name).read_text()


def test_diff_shows_what_an_ablation_changes() -> None:
    res = runner.invoke(app, ["recipe", "diff", GRPO], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "ppo.advantage.estimator" in res.stdout and "grpo" in res.stdout
    assert "ppo.clip_eps" not in res.stdout


def test_diff_against_an_explicit_base() -> None:
    res = runner.invoke(app, ["recipe", "diff", TINY, "--against", TINY])
    assert res.exit_code == 0 and "no differences" in res.stdout


def test_diff_without_a_base_exits_2() -> None:
    res = run("diff", TINY)
    assert res.exit_code == 2 and "--against" in res.stderr


@pytest.mark.parametrize("verb", ["validate", "show", "schema", "diff"])
def test_every_verb_has_help(verb: str) -> None:
    res = run(verb, "--help")
    assert res.exit_code == 0 and "Usage" in res.stdout


def test_diff_never_wraps_a_field_name_when_piped() -> None:
    # CliRunner's stdout is not a TTY, as when piped: rich would fall back to 80 columns and fold names.
    res = runner.invoke(app, ["recipe", "diff", GRPO])
    assert res.exit_code == 0, res.output
    assert "ppo.advantage.group_size" in res.stdout


def test_diff_field_column_survives_a_narrow_console(monkeypatch) -> None:
    from rich.console import Console

    import t1.cli_recipe as cli_recipe

    monkeypatch.setattr(
        cli_recipe, "_diff_console", lambda: Console(soft_wrap=True, highlight=False, width=60)
    )
    res = runner.invoke(app, ["recipe", "diff", GRPO])
    assert res.exit_code == 0, res.output
    assert "ppo.advantage.group_size" in res.stdout


def test_diff_takes_overrides_and_shows_what_they_change() -> None:
    res = run("diff", TINY, "ppo.steps=1")
    assert res.exit_code == 0, res.output
    assert "ppo.steps" in res.stdout and "ppo.batch_size" not in res.stdout


def test_schema_out_on_an_existing_file_exits_2(tmp_path) -> None:
    target = tmp_path / "taken"
    target.write_text("keep me")
    res = run("schema", "--out", str(target))
    assert res.exit_code == 2 and "not a folder" in res.stderr
    assert target.read_text() == "keep me"
