"""The generated spec reference: faithful to a known schema, in sync with specs/v1, complete."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field


class _S(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class Dense(_S):
    """Dense toy reward."""

    kind: Literal["dense"] = "dense"
    """Discriminator."""

    scale: float = Field(default=20.0, gt=0)
    """S: fixed global scale (assertions). 20 (T1 §5.2, Eq. 20)."""


class Binary(_S):
    """Binary toy reward."""

    kind: Literal["binary"] = "binary"
    """Discriminator."""


class Limits(_S):
    """Toy deadlines."""

    agent_deadline_s: float = Field(gt=0, le=7200)
    """Deadline of the agent phase (seconds). 3600 s (T1 §7.3)."""

    memory_gib: int = Field(default=2, ge=1)
    """Memory per sandbox (GiB). 2 GiB chosen."""

    tags: list[str] = Field(default_factory=list, max_length=4)
    """Free labels."""


class Toy(_S):
    """A toy recipe, shaped like the real one."""

    name: str = Field(min_length=1)
    """Run name."""

    reward: Annotated[Dense | Binary, Field(discriminator="kind")]
    """Verifier report to scalar reward."""

    limits: Limits | None = None
    """Optional limits."""


@pytest.fixture()
def toy_page(gen, tmp_path: Path) -> str:
    (tmp_path / "toy.json").write_text(json.dumps(Toy.model_json_schema()), encoding="utf-8")
    pages = gen.render_all(tmp_path)
    assert set(pages) == {"toy.md", "index.md"}
    return pages["toy.md"]


def _row(page: str, model: str, field: str) -> list[str]:
    """Cells of ``field``'s row in ``model``'s section."""
    section = page.split(f"\n## {model} ", 1)[1].split("\n## ", 1)[0]
    for line in section.splitlines():
        if line.startswith(f"| `{field}` |"):
            return [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
    raise AssertionError(f"no row for {field} in {model}")


def test_field_row_has_type_default_unit_constraints_source(toy_page: str) -> None:
    name, typ, default, unit, constraints, source, desc = _row(toy_page, "Dense", "scale")
    assert (name, typ, default, unit, constraints, source) == (
        "`scale`",
        "number",
        "`20.0`",
        "assertions",
        "> 0",
        "T1 §5.2, Eq. 20",
    )
    assert "fixed global scale" in desc


def test_required_field_and_both_bounds(toy_page: str) -> None:
    _, typ, default, unit, constraints, source, _ = _row(toy_page, "Limits", "agent_deadline_s")
    assert (typ, default, unit, source) == ("number", "**required**", "seconds", "T1 §7.3")
    assert constraints == "> 0, ≤ 7200"


def test_chosen_default_is_marked_as_chosen(toy_page: str) -> None:
    _, typ, default, unit, constraints, source, _ = _row(toy_page, "Limits", "memory_gib")
    assert (typ, default, unit, constraints, source) == ("integer", "`2`", "GiB", "≥ 1", "chosen")


def test_list_and_factory_default(toy_page: str) -> None:
    _, typ, default, _, constraints, _, _ = _row(toy_page, "Limits", "tags")
    assert typ == "list of string"
    assert default == "— (optional)"
    assert constraints == "items ≤ 4"


def test_discriminated_union_is_shown_per_kind(toy_page: str) -> None:
    _, typ, *_ = _row(toy_page, "Toy", "reward")
    assert typ.startswith("one of (by `kind`)")
    assert "[Dense](#dense)" in typ and "[Binary](#binary)" in typ
    assert "| `dense` | [Dense](#dense) |" in toy_page
    assert "| `binary` | [Binary](#binary) |" in toy_page
    assert "Used at: `reward` (`kind: dense`)" in toy_page
    assert "Used at: `reward` (`kind: binary`)" in toy_page


def test_optional_nested_model_links_and_path(toy_page: str) -> None:
    _, typ, default, *_ = _row(toy_page, "Toy", "limits")
    assert typ == "[Limits](#limits) or null"
    assert default == "`null`"
    assert "Used at: `limits`" in toy_page


def test_models_in_reading_order(toy_page: str) -> None:
    heads = re.findall(r"^## (\w+) ", toy_page, flags=re.M)
    assert heads == ["Toy", "Dense", "Binary", "Limits"]


def test_unit_and_source_extraction(gen) -> None:
    assert gen.extract_unit("Deadline (seconds). 900 s (T1 §7.3).") == "seconds"
    assert gen.extract_unit("Plain count (T1 §7.4).") == "—"
    assert gen.extract_unit("Memory limit per container (MiB, ``--memory``).") == "MiB"
    assert gen.extract_source("r = P / S (T1 §5.2, Eq. 20); see also T1 §5.3.") == "T1 §5.2, Eq. 20; T1 §5.3"
    assert gen.extract_source("No paper reference here.") == "—"


def test_committed_reference_matches_schemas(gen, root: Path, tmp_path: Path) -> None:
    """Regenerate from specs/v1 into a tmp dir; the committed docs/specs pages must be identical."""
    pages = gen.render_all(root / "specs" / "v1")
    gen.write_pages(pages, tmp_path)
    committed = root / "docs" / "specs"
    stale = gen.drift(pages, committed)
    assert not stale, f"docs/specs out of date ({stale}): run `uv run python tools/gen_spec_docs.py`"
    for name in pages:
        assert (tmp_path / name).read_text(encoding="utf-8") == (committed / name).read_text(encoding="utf-8")


def test_mkdocs_nav_lists_the_generated_pages(gen, root: Path, tmp_path: Path) -> None:
    _, nav = gen.build_site(root / "specs" / "v1")
    assert gen.nav_in_sync(root / "mkdocs.yml", nav), "run `uv run python tools/gen_spec_docs.py`"
    copy = tmp_path / "mkdocs.yml"
    copy.write_text("nav:\n  - Specs:\n      # specs-nav:start x\n      - old.md\n      # specs-nav:end\n")
    gen.write_nav(copy, [("reward", "reward.md")])
    assert copy.read_text() == (
        "nav:\n  - Specs:\n      # specs-nav:start x\n      - specs/index.md\n"
        "      - reward: specs/reward.md\n      # specs-nav:end\n"
    )


def _models(schema: dict) -> dict[str, dict]:
    title = schema.get("title", "Root")
    return {title: schema, **{k: v for k, v in schema.get("$defs", {}).items() if k != title}}


def test_every_property_of_every_schema_is_documented(root: Path) -> None:
    """Read the committed pages, not the generator: every model of every schema file has exactly one section
    in docs/specs, and that section has a row for each of its properties."""
    pages = {p.name: p.read_text(encoding="utf-8") for p in (root / "docs" / "specs").glob("*.md")}
    schemas = sorted((root / "specs" / "v1").glob("*.json"))
    missing = []
    for path in schemas:
        for model, body in _models(json.loads(path.read_text(encoding="utf-8"))).items():
            head = f"\n## {model} {{"
            where = [name for name, text in pages.items() if head in text]
            if len(where) != 1:
                missing.append(f"{path.name}: model {model} has {len(where)} sections ({where})")
                continue
            section = pages[where[0]].split(head, 1)[1].split("\n## ", 1)[0]
            for prop in body.get("properties", {}):
                if f"\n| `{prop}` |" not in section:
                    missing.append(f"{path.name}: {model}.{prop}")
    assert schemas, "no schema in specs/v1"
    assert not missing, "undocumented: " + ", ".join(missing)


def test_page_name_drops_schema_suffix(gen) -> None:
    assert gen.page_name(Path("specs/v1/recipe.schema.json")) == "recipe.md"
    assert gen.page_name(Path("specs/v1/model.json")) == "model.md"


def test_each_model_is_documented_once_and_linked_across_pages(gen, tmp_path: Path) -> None:
    """A section file that is a discriminated union owns its variants; the composite page links to them."""
    from pydantic import TypeAdapter

    reward = TypeAdapter(Annotated[Dense | Binary, Field(discriminator="kind")]).json_schema()
    reward["title"] = "RewardSpec"
    (tmp_path / "reward.schema.json").write_text(json.dumps(reward), encoding="utf-8")
    (tmp_path / "toy.schema.json").write_text(json.dumps(Toy.model_json_schema()), encoding="utf-8")
    pages = gen.render_all(tmp_path)
    assert "\n## Dense {" in pages["reward.md"] and "\n## Dense {" not in pages["toy.md"]
    assert "[Dense](reward.md#dense)" in pages["toy.md"]
    assert "| `dense` | [Dense](#dense) |" in pages["reward.md"]
    assert "Used at: `reward`" in pages["reward.md"]  # the union root sits where its variants sit


def test_required_unless_extends(gen) -> None:
    body = {
        "properties": {"schema": {}, "name": {}, "extends": {}},
        "if": {"required": ["extends"]},
        "then": {"required": ["schema"]},
        "else": {"required": ["schema", "name"]},
    }
    always, unless = gen._required(body)
    assert always == {"schema"}
    assert unless == {"name": "`extends:`"}
    assert gen.render_default({}, False, unless["name"]) == "**required** unless `extends:` is given"
