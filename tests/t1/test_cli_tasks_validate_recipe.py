"""`t1 tasks validate --recipe R`: the checks run on the recipe's sandbox backend and write the record.

The record is what failure attribution reads (``t1_rollout.attribution``): its oracle row carries the
backend's network policy, so a record taken in Docker without network decides for training in Docker
without network.
"""

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from t1.cli import app

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def _docker_ready() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        import docker

        docker.from_env().ping()
    except Exception:
        return False
    return True


@pytest.mark.docker
@pytest.mark.skipif(not _docker_ready(), reason="needs a Docker daemon")
def test_validate_with_the_docker_recipe_runs_in_docker_and_writes_the_record(tmp_path):
    record = tmp_path / "record.json"
    result = runner.invoke(
        app,
        [
            "tasks",
            "validate",
            "--recipe",
            str(REPO / "recipes/tiny-docker.yaml"),
            "builtin:mini",
            "--limit",
            "1",
            "--record",
            str(record),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "in docker sandboxes" in result.output and "no network" in result.output
    row = json.loads(record.read_text())["tasks"][0]
    assert row["verdict"] == "ok"
    assert row["oracle"]["report_source"] == "ctrf" and row["oracle"]["network"] is False


def test_a_recipe_that_does_not_load_is_refused_with_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema: t1/v1\nsandbox:\n  kind: nowhere\n")
    result = runner.invoke(app, ["tasks", "validate", "--recipe", str(bad), "builtin:mini", "--limit", "1"])
    assert result.exit_code == 2, result.output
    assert "validating" not in result.output


def test_the_local_refusal_names_the_option_that_takes_a_recipe(monkeypatch):
    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "bwrap" else real_which(name))
    result = runner.invoke(app, ["tasks", "validate", "builtin:mini", "--limit", "1"])
    assert result.exit_code == 1, result.output
    assert "t1 tasks validate --recipe RECIPE" in result.output


def test_list_loads_a_task_with_a_key_harbor_ignores_and_names_the_key(tmp_path):
    import shutil as sh

    from t1_tasks import load_pool

    task = next(iter(load_pool("builtin:mini")))
    sh.copytree(task.path, tmp_path / task.id)
    with open(tmp_path / task.id / "task.toml", "a") as fh:
        fh.write('\n[task]\nname = "t1/x"\nformat = "harbor"\n')
    result = runner.invoke(app, ["tasks", "list", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert task.id in result.output and "broken" not in result.output
    assert "1 task.toml key ignored, as Harbor ignores them" in result.output
    assert "field task.format is not a key of Harbor's task model" in result.output
