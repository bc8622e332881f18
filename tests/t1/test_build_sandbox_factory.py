"""The run's sandbox factory passes each backend what it takes from the run (``Sandbox.run_options``)."""

from __future__ import annotations

from pathlib import Path

from t1.run.build import default_run_id, sandbox_factory
from t1_sandbox.daytona import DaytonaSandbox
from t1_sandbox.local import LocalSandbox
from t1_spec import load_recipe

TINY = Path(__file__).resolve().parents[2] / "recipes" / "tiny-cpu.yaml"


def _daytona_recipe(tmp_path: Path, *overrides: str):
    recipe = tmp_path / "tiny-daytona.yaml"
    recipe.write_text(f"schema: t1/v1\nextends: {TINY}\nsandbox:\n  kind: daytona\n")
    return load_recipe(recipe, list(overrides))


def test_daytona_sandboxes_get_the_run_id_and_the_recipes_creation_pacing(tmp_path):
    recipe = _daytona_recipe(tmp_path, "rollout.creation_rate_per_s=2", "rollout.creation_quota_per_min=300")
    make = sandbox_factory(recipe, run_id="run-x")
    first, second = make(), make()
    assert isinstance(first, DaytonaSandbox) and first is not second
    assert (first.run_id, second.run_id) == ("run-x", "run-x")
    assert first._pacing == (2.0, 300.0)  # not RolloutSpec's 6 / s and 600 / min


def test_the_run_id_is_t1_run_id_else_the_recipe_name_host_and_process(tmp_path, monkeypatch):
    recipe = _daytona_recipe(tmp_path)
    monkeypatch.setenv("T1_RUN_ID", "from-env")
    assert default_run_id(recipe) == "from-env" and sandbox_factory(recipe)().run_id == "from-env"
    monkeypatch.delenv("T1_RUN_ID")
    assert default_run_id(recipe).startswith(f"{recipe.name}-")


def test_a_backend_without_run_options_gets_only_its_section():
    recipe = load_recipe(TINY)
    assert LocalSandbox.run_options(recipe, run_id="x") == {}
    assert isinstance(sandbox_factory(recipe, run_id="x")(), LocalSandbox)
