"""docs/tasks.md stays true to the code: task.toml keys, Dockerfile subset, worked example, weight loading.

Expected values come from the page itself (what it promises a reader) and are checked against the behaviour of
``t1_tasks``, ``t1_rollout`` and ``t1_trainer``, never against constants copied into this file.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import os
import re
import shutil
import tomllib
from pathlib import Path

import pytest

from t1_tasks import TaskError, load_task

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "tasks.md"
TASK_PY = ROOT / "packages" / "t1-tasks" / "src" / "t1_tasks" / "task.py"

needs_sandbox = pytest.mark.skipif(
    shutil.which("bwrap") is None or os.geteuid() != 0,
    reason="needs bubblewrap (apt-get install bubblewrap) and root",
)


def _page() -> str:
    return PAGE.read_text(encoding="utf-8")


def _section(heading: str) -> str:
    """The page's text from the heading line ``heading`` to the next heading of the same or a higher level
    (``#`` lines inside fenced code blocks are not headings)."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = _page().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.rstrip("\n") == heading) + 1
    out: list[str] = []
    fenced = False
    for line in lines[start:]:
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(rf"#{{1,{level}}} ", line):
            break
        out.append(line)
    return "".join(out)


def _table_first_cells(section: str) -> list[str]:
    """First cells of the Markdown table rows in ``section`` (header and separator rows dropped)."""
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    return [row.split("|")[1].strip() for row in rows[2:]]


def _toml_keys_on_page() -> dict[str, str]:
    """``{"metadata.category": default cell, ...}`` from the page's task.toml table."""
    rows = [line for line in _section("### task.toml").splitlines() if line.startswith("| `")]
    return {row.split("|")[1].strip().strip("`"): row.split("|")[3].strip() for row in rows}


def _titled_blocks() -> dict[str, str]:
    """The worked example's files: fenced blocks with ``title="..."``, keyed by title."""
    return dict(
        (title, body)
        for title, body in re.findall(r'^```\w+ title="([^"]+)"\n(.*?)^```$', _page(), re.M | re.S)
    )


def _write_example(tmp_path: Path) -> Path:
    """The page's count-lines bundle, rebuilt from the page's blocks and its notes.txt command."""
    bundle = tmp_path / "mypool" / "count-lines"
    for rel, body in _titled_blocks().items():
        (bundle / rel).parent.mkdir(parents=True, exist_ok=True)
        (bundle / rel).write_text(body, encoding="utf-8")
    printf = re.search(r"`printf '([^']*)' > environment/notes\.txt", _page())
    assert printf, "the page no longer says how notes.txt is made"
    notes = printf.group(1).encode().decode("unicode_escape")
    for rel in ("environment/notes.txt", "tests/notes.txt"):
        (bundle / rel).write_text(notes, encoding="utf-8")
    return bundle


def _with_toml(bundle: Path, text: str) -> Path:
    (bundle / "task.toml").write_text(text, encoding="utf-8")
    return bundle


def _loader_key_strings() -> set[str]:
    """Identifier-like string constants in ``load_task`` that are not path components (``root / "tests"``)."""
    tree = ast.parse(TASK_PY.read_text(encoding="utf-8"))
    func = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "load_task")
    paths = {
        id(n.right)
        for n in ast.walk(func)
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div) and isinstance(n.right, ast.Constant)
    }
    return {
        n.value
        for n in ast.walk(func)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and re.fullmatch(r"[a-z_]+", n.value)
        and id(n) not in paths
    }


# --------------------------------------------------------------------------- task.toml


def test_every_key_the_loader_reads_is_on_the_page() -> None:
    """A key ``load_task`` looks up but the page leaves out would be a silent contract change."""
    on_page = _toml_keys_on_page()
    named = {part for key in on_page for part in key.split(".")} | {"environment"}  # [environment]: prose
    assert _loader_key_strings() <= named, _loader_key_strings() - named


@pytest.mark.parametrize("key", ["metadata.category", "metadata.difficulty", "metadata.tags"])
def test_each_metadata_key_on_the_page_is_read(tmp_path: Path, key: str) -> None:
    """A wrong type under a listed key is refused with the key named: the loader reads it."""
    assert key in _toml_keys_on_page()
    bundle = _write_example(tmp_path)
    section, name = key.split(".")
    lines = ['version = "1.0"', f"[{section}]", f"{name} = 7"]
    lines += [f'{k} = "x"' for k in ("category", "difficulty") if k != name]
    with pytest.raises(TaskError, match=re.escape(key)):
        load_task(_with_toml(bundle, "\n".join(lines) + "\n"))


@pytest.mark.parametrize("key", ["agent.timeout_sec", "verifier.timeout_sec"])
def test_timeouts_on_the_page_are_read_with_the_stated_default(tmp_path: Path, key: str) -> None:
    on_page = _toml_keys_on_page()
    default_s = float(on_page[key])
    bundle = _write_example(tmp_path)
    section, name = key.split(".")
    attr = f"{section}_timeout_s"
    example = tomllib.loads(_titled_blocks()["task.toml"])
    assert getattr(load_task(bundle), attr) == float(example[section][name])
    base = '[metadata]\ncategory = "x"\ndifficulty = "easy"\n'
    assert getattr(load_task(_with_toml(bundle, base)), attr) == default_s
    with pytest.raises(TaskError, match=re.escape(f"{section}.{name}")):
        load_task(_with_toml(bundle, base + f"[{section}]\n{name} = 0\n"))


def test_keys_the_page_calls_unused_change_nothing(tmp_path: Path) -> None:
    """``author_name`` changes nothing; ``version`` only ``schema_version``; ``[environment]`` only
    ``Task.environment`` (kept for the backend), and a value Harbor does not have is refused by name."""
    import dataclasses

    bundle = _write_example(tmp_path)
    plain = load_task(bundle)
    text = _titled_blocks()["task.toml"].replace('version = "1.0"', 'version = "9.9"')
    text = text.replace("[metadata]\n", '[metadata]\nauthor_name = "someone"\n')
    text += '\n[environment]\ncpus = 64\nmemory_mb = 1\nstorage_mb = 1\nnetwork_mode = "no-network"\n'
    changed = load_task(_with_toml(bundle, text))
    assert dataclasses.replace(changed, environment=plain.environment, schema_version="1.0") == plain
    assert (changed.environment.cpus, changed.environment.memory_mb, changed.schema_version) == (64, 1, "9.9")
    with pytest.raises(TaskError, match=r"environment\.network_mode must be one of"):
        load_task(_with_toml(bundle, text.replace('"no-network"', '"bridge"')))


# --------------------------------------------------------------------------- Dockerfile subset


def test_dockerfile_table_is_the_parser_subset() -> None:
    from t1_sandbox.dockerfile import SUPPORTED_BASES, SUPPORTED_INSTRUCTIONS

    cells = _table_first_cells(_section("## The environment: what the local sandbox builds"))
    names = [re.match(r"`(\w+)", cell).group(1) for cell in cells]
    assert tuple(names) == SUPPORTED_INSTRUCTIONS
    bases = set(re.findall(r"`FROM ([\w:.\-/]+)`", cells[0]))
    assert bases == set(SUPPORTED_BASES)


@pytest.mark.parametrize("instruction", ["EXPOSE 8080", "USER root", "ARG X=1", "CMD bash"])
def test_instructions_the_page_says_are_refused_are_refused_by_name(tmp_path: Path, instruction: str) -> None:
    from t1_sandbox.base import UnsupportedDockerfileInstruction
    from t1_sandbox.dockerfile import parse_dockerfile

    name = instruction.split()[0]
    assert f"`{name}`" in _section("## The environment: what the local sandbox builds")
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(f"FROM debian:bookworm-slim\nWORKDIR /app\n{instruction}\n")
    with pytest.raises(UnsupportedDockerfileInstruction, match=rf"Dockerfile:3: instruction {name} "):
        parse_dockerfile(dockerfile)


# --------------------------------------------------------------------------- worked example


def test_worked_example_has_the_assertion_count_the_page_states(tmp_path: Path) -> None:
    task = load_task(_write_example(tmp_path))
    stated = re.search(r"(\d+) assertions\.", _section("## Worked example: a new task and pool"))
    assert stated and task.n_assertions == int(stated.group(1))
    row = re.search(r"^\s+count-lines\s+(\S+)\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+)", _page(), re.M)
    assert row, "the page's `t1 tasks list` output is gone"
    assert (task.category, task.difficulty, task.n_assertions) == (row[1], row[2], int(row[3]))
    assert (task.agent_timeout_s, task.verifier_timeout_s) == (float(row[4]), float(row[5]))


@needs_sandbox
def test_worked_example_validates_as_the_page_shows(tmp_path: Path) -> None:
    """The page's bundle, in a real local sandbox: the oracle and do-nothing scores the page prints."""
    from t1_rollout.validate import validate_task
    from t1_sandbox.local import LocalSandbox

    shown = re.search(r"^\s+count-lines\s+(\d+)/(\d+)\s+(\d+)/(\d+)\s+ok", _page(), re.M)
    assert shown, "the page's `t1 tasks validate` table is gone"
    task = load_task(_write_example(tmp_path))
    result = asyncio.run(validate_task(task, sandbox_factory=LocalSandbox, work_dir=tmp_path / "out"))
    assert result.ok, result.problems
    got = (result.oracle.passed, result.oracle.total, result.nop.passed, result.nop.total)
    assert got == tuple(int(x) for x in shown.groups())


# --------------------------------------------------------------------------- loading weights


def _python_blocks(section: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", section, re.M | re.S)


def test_weight_loading_snippet_loads_what_training_saves(tmp_path: Path) -> None:
    """The page's snippet, on a run folder written by the trainer's own code (tiny model), loads every tensor
    and prints what the page shows."""
    import torch

    from t1_spec import load_recipe, recipe_to_yaml
    from t1_trainer import TorchBackend
    from t1_trainer.weights import save_weights

    section = _section("## Loading trained weights")
    (snippet,) = _python_blocks(section)
    (shown,) = re.findall(r"^```text\n(.*?)^```$", section, re.M | re.S)
    small = [
        "model.hidden_size=16",
        "model.num_layers=1",
        "model.full_attention_interval=1",
        "model.num_experts=2",
        "model.top_k=1",
        "model.moe_intermediate_size=8",
        "model.shared_expert_intermediate_size=8",
    ]
    recipe = load_recipe(ROOT / "recipes" / "tiny-cpu.yaml", small)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "recipe.yaml").write_text(recipe_to_yaml(recipe))
    backend = TorchBackend(model_spec=recipe.model, ppo_spec=recipe.ppo, seed=recipe.seed)
    with torch.no_grad():  # "trained": weights that a fresh build from the seed would not have
        for module in (backend.actor, backend.critic):
            for p in module.parameters():
                p.add_(0.5)
    save_weights(backend, run_dir)

    line = f"run_dir = Path({str(run_dir)!r})"
    code, n = re.subn(r'^run_dir = Path\("[^"]*"\)$', line, snippet, flags=re.M)
    assert n == 1, "the snippet no longer sets run_dir = Path(...)"
    namespace: dict = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(PAGE), "exec"), namespace)
    assert out.getvalue() == shown
    for loaded, saved in ((namespace["actor"], backend.actor), (namespace["critic"], backend.critic)):
        want = saved.state_dict()
        got = loaded.state_dict()
        assert got.keys() == want.keys()
        assert all(torch.equal(got[k], want[k]) for k in want)
