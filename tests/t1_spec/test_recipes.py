"""Every shipped recipe validates, carries the schema header, and the committed JSON Schemas match the
code."""

from __future__ import annotations

from pathlib import Path

import pytest

from t1_spec import load_recipe
from t1_spec.schema import all_schemas, export_schemas

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted((ROOT / "recipes").glob("*.yaml"))
HEADER = "# yaml-language-server: $schema=../specs/v1/recipe.schema.json"


def test_the_expected_recipes_ship() -> None:
    names = {p.stem for p in RECIPES}
    assert {"tiny-cpu", "t1-122b", "binary-tmax", "ratio-reward", "grpo", "no-r3", "cold-critic"} <= names


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_every_recipe_validates(path: Path) -> None:
    recipe = load_recipe(path)
    assert recipe.name == path.stem


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_every_recipe_starts_with_the_schema_header(path: Path) -> None:
    assert path.read_text(encoding="utf-8").splitlines()[0] == HEADER


def test_committed_schemas_match_the_code(tmp_path: Path) -> None:
    written = export_schemas(tmp_path)
    committed = ROOT / "specs" / "v1"
    assert {p.name for p in written} == {p.name for p in committed.glob("*.schema.json")}, (
        "specs/v1 has stale or missing files: run `uv run t1 recipe schema --out specs/v1`"
    )
    for p in written:
        assert p.read_text(encoding="utf-8") == (committed / p.name).read_text(encoding="utf-8"), (
            f"specs/v1/{p.name} drifted from the code: run `uv run t1 recipe schema --out specs/v1`"
        )


def test_export_writes_one_schema_per_section() -> None:
    names = set(all_schemas())
    for section in (
        "recipe",
        "model",
        "pool",
        "plan",
        "reward",
        "ppo",
        "critic_warmup",
        "rollout",
        "sandbox",
        "engine",
        "trainer",
        "evaluation",
        "logging",
    ):
        assert f"{section}.schema.json" in names


def _properties(schema: object):
    if isinstance(schema, dict):
        yield from (schema.get("properties") or {}).items()
        for value in schema.values():
            yield from _properties(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _properties(value)


def test_every_field_of_every_spec_has_a_description() -> None:
    for file, schema in all_schemas().items():
        for name, prop in _properties(schema):
            assert prop.get("description", "").strip(), f"{file}: field {name} has no docstring"
