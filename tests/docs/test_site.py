"""The documentation site: the strict build, and pages that must stay true to the code."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml


def _nav_files(nav: list) -> list[str]:
    out: list[str] = []
    for item in nav:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            for value in item.values():
                out.extend(_nav_files(value) if isinstance(value, list) else [value])
    return out


def _mkdocs_config(root: Path) -> dict:
    # mkdocs.yml has no custom YAML tags; a plain safe load is enough.
    return yaml.safe_load((root / "mkdocs.yml").read_text(encoding="utf-8"))


@pytest.mark.slow
def test_mkdocs_build_strict(root: Path, tmp_path: Path) -> None:
    """`mkdocs build --strict` succeeds: no broken link or anchor, no page left out of the nav, no docstring
    griffe cannot parse."""
    out = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    warnings = [line for line in proc.stderr.splitlines() if "WARNING" in line or "ERROR" in line]
    assert proc.returncode == 0, "mkdocs build --strict failed:\n" + "\n".join(
        warnings or [proc.stderr[-3000:]]
    )
    assert (out / "index.html").is_file()
    assert (out / "specs" / "recipe" / "index.html").is_file()


def test_every_page_is_in_the_nav(root: Path) -> None:
    nav = set(_nav_files(_mkdocs_config(root)["nav"]))
    docs = root / "docs"
    pages = {p.relative_to(docs).as_posix() for p in docs.rglob("*.md") if "_templates" not in p.parts}
    assert pages - nav == set(), f"pages missing from mkdocs.yml nav: {sorted(pages - nav)}"
    expected_missing = {"concepts/capacity.md"}  # written by another page owner; the build reports it
    assert nav - pages <= expected_missing, (
        f"nav entries without a page: {sorted(nav - pages - expected_missing)}"
    )


def test_mkdocstrings_paths_cover_every_package(root: Path) -> None:
    cfg = _mkdocs_config(root)
    paths = set(cfg["plugins"][1]["mkdocstrings"]["handlers"]["python"]["paths"])
    packages = {p.relative_to(root).as_posix() for p in (root / "packages").glob("*/src")}
    assert paths == packages
    for src in (root / "packages").glob("*/src"):
        for module in src.iterdir():
            if module.is_dir() and (module / "__init__.py").is_file():
                page = root / "docs" / "api" / f"{module.name}.md"
                assert f"::: {module.name}\n" in page.read_text(encoding="utf-8"), page


def test_recipe_guide_carries_the_policy_and_the_rules_verbatim(root: Path) -> None:
    from t1_spec.rules import rules_markdown
    from t1_spec.versioning import COMPATIBILITY_POLICY

    text = (root / "docs" / "recipes.md").read_text(encoding="utf-8")
    for name, expected in (("policy", COMPATIBILITY_POLICY), ("rules", rules_markdown())):
        body = text.split(f"<!-- {name}:start -->\n", 1)[1].split(f"<!-- {name}:end -->", 1)[0]
        assert body.strip() == expected.strip(), f"docs/recipes.md {name} block: run tools/gen_spec_docs.py"


def test_recipe_guide_lists_every_recipe(root: Path) -> None:
    text = (root / "docs" / "recipes.md").read_text(encoding="utf-8")
    table = text.split("## Recipes in `recipes/`", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `([^`]+\.yaml)` \|", table, flags=re.M))
    present = {p.name for p in (root / "recipes").glob("*.yaml")}
    assert listed == present, f"docs/recipes.md lists {sorted(listed)}, recipes/ holds {sorted(present)}"


def test_getting_started_explains_every_column_of_the_step_table(root: Path) -> None:
    from t1.run.console import metrics_table

    text = (root / "docs" / "getting-started.md").read_text(encoding="utf-8")
    table = text.split("| Column | Meaning |", 1)[1].split("\n\n", 1)[0]
    first_cells = [line[2:].split(" | ", 1)[0] for line in table.splitlines() if line.startswith("| `")]
    documented = {name for cell in first_cells for name in re.findall(r"`([^`]+)`", cell)}
    columns = {str(c.header) for c in metrics_table().columns}
    assert columns == documented, f"step table columns {sorted(columns)}, documented {sorted(documented)}"


def test_recipe_guide_shows_what_train_refuses_today(root: Path) -> None:
    """The refusal example for recipes/t1-122b.yaml is what the preflight says about it now, line for line."""
    from t1.run import preflight
    from t1_spec import load_recipe

    text = (root / "docs" / "recipes.md").read_text(encoding="utf-8")
    example = text.split("$ uv run t1 train recipes/t1-122b.yaml\n", 1)[1].split("```", 1)[0]
    documented = [line.removeprefix("  - ") for line in example.splitlines()[1:]]
    verdict = preflight(load_recipe(root / "recipes" / "t1-122b.yaml"))
    assert documented == list(verdict.invalid + verdict.problems)


def _click_app():
    import typer.main

    from t1.cli import app

    return typer.main.get_command(app)


def _is_group(cmd) -> bool:
    # typer vendors its own click, so test the shape rather than click.Group.
    return isinstance(getattr(cmd, "commands", None), dict)


def _leaves(group, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], object]:
    out = {}
    for name, cmd in group.commands.items():
        if _is_group(cmd):
            out.update(_leaves(cmd, prefix + (name,)))
        else:
            out[prefix + (name,)] = cmd
    return out


def _options(cmd) -> set[str]:
    opts: set[str] = set()
    for p in cmd.params:
        opts.update(getattr(p, "opts", []))
        opts.update(getattr(p, "secondary_opts", []))
    return {o for o in opts if o.startswith("-")} - {"--help"}


def test_cli_reference_lists_every_verb_and_every_option(root: Path) -> None:
    """docs/cli.md names every `t1` verb, and its options table matches each verb's real options."""
    leaves = _leaves(_click_app())
    text = (root / "docs" / "cli.md").read_text(encoding="utf-8")
    for path in leaves:
        assert f"`t1 {' '.join(path)}" in text, f"t1 {' '.join(path)} missing from docs/cli.md"
    table = text.split("## Options per verb", 1)[1].split("\n## ", 1)[0]
    seen: set[tuple[str, ...]] = set()
    for line in table.splitlines():
        if not line.startswith("| `"):
            continue
        verbs_cell, opts_cell = line.split(" | ", 1)
        documented = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*|-[a-z])\b", opts_cell))
        for verb in re.findall(r"`([^`]+)`", verbs_cell):
            path = tuple(verb.split())
            assert path in leaves, f"docs/cli.md documents options of unknown verb {verb!r}"
            seen.add(path)
            real = _options(leaves[path])
            assert documented == real, f"t1 {verb}: documented {sorted(documented)}, real {sorted(real)}"
    assert seen == set(leaves), f"verbs without an options row: {sorted(set(leaves) - seen)}"


def _doc_commands(root: Path) -> list[tuple[str, str]]:
    """Every `uv run t1 ...` line inside a fenced code block of the docs and the README (file, command)."""
    found = []
    for page in [*sorted((root / "docs").rglob("*.md")), root / "README.md"]:
        text = page.read_text(encoding="utf-8")
        for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S):
            for line in block.splitlines():
                line = line.removeprefix("$ ").strip()
                if line.startswith("uv run t1 "):
                    found.append((page.name, line.split(" #", 1)[0].strip()))
    return found


def test_doc_commands_parse_against_the_real_cli(root: Path) -> None:
    """Each documented `uv run t1 ...` names a real verb, real options, and files that exist."""
    commands = _doc_commands(root)
    assert len(commands) >= 10
    app = _click_app()
    for page, line in commands:
        args = shlex.split(line)[3:]
        cmd, ctx_path = app, []
        while _is_group(cmd):
            assert args and args[0] in cmd.commands, (
                f"{page}: {line!r}: no verb {args[:1]} under t1 {ctx_path}"
            )
            ctx_path.append(args[0])
            cmd = cmd.commands[args.pop(0)]
        known = _options(cmd)
        for arg in args:
            if arg.startswith("-"):
                assert arg.split("=", 1)[0] in known, f"{page}: {line!r}: unknown option {arg}"
            elif arg.startswith("recipes/"):
                assert (root / arg).is_file(), f"{page}: {line!r}: no file {arg}"
        ctx = cmd.make_context("t1", list(args), resilient_parsing=True)  # parses, runs nothing
        assert ctx is not None


def test_exit_codes_match_the_cli(root: Path) -> None:
    from t1._errors import EXIT_CHECK_FAILED, EXIT_INTERRUPTED, EXIT_INVALID_INPUT, EXIT_OK

    text = (root / "docs" / "cli.md").read_text(encoding="utf-8")
    for code, word in (
        (EXIT_OK, "success"),
        (EXIT_CHECK_FAILED, "the input is valid, but the check failed or the work cannot be done here"),
        (EXIT_INVALID_INPUT, "invalid input"),
        (EXIT_INTERRUPTED, "interrupted by Ctrl-C"),
    ):
        assert f"| {code} | {word}" in text or f"| {code} | the {word}" in text
