"""Module-level house rules: small modules, and typed spec seams in every library package."""

from __future__ import annotations

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
MAX_MODULE_LINES = 600
CLI_PACKAGE = "t1"


def test_no_module_over_600_lines(package):
    too_long = []
    for path in package.modules:
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            too_long.append(f"{path.relative_to(REPO_ROOT)} ({lines:,} lines)")
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines (split them by trade): {too_long}"


def _is_any(annotation: ast.expr | None) -> bool:
    """Whether an annotation is ``Any`` (``typing.Any``, ``Any | None``, ``Optional[Any]``), or absent."""
    if annotation is None:
        return True  # an unannotated spec is an implicit Any
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return False
    if isinstance(annotation, ast.Name):
        return annotation.id == "Any"
    if isinstance(annotation, ast.Attribute):
        return annotation.attr == "Any"
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return _is_any(annotation.left) or _is_any(annotation.right)
    if isinstance(annotation, ast.Subscript) and isinstance(annotation.value, ast.Name | ast.Attribute):
        head = annotation.value.id if isinstance(annotation.value, ast.Name) else annotation.value.attr
        if head in ("Optional", "Union"):
            inner = annotation.slice
            parts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
            return any(_is_any(p) for p in parts)
    return False


def _is_public(name: str) -> bool:
    return not name.startswith("_") or (name.startswith("__") and name.endswith("__"))


def _public_functions(tree: ast.Module):
    """Yield ``(qualified name, function)`` for every public function and method of public classes."""

    def walk(body, prefix: str):
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _is_public(node.name):
                yield prefix + node.name, node
            elif isinstance(node, ast.ClassDef) and _is_public(node.name):
                yield from walk(node.body, prefix + node.name + ".")

    yield from walk(tree.body, "")


def test_no_library_function_takes_a_spec_as_any(package):
    """A parameter named ``spec`` or ``*_spec`` has its ``t1_spec`` class, never ``Any`` (or nothing)."""
    if package.dist == CLI_PACKAGE:
        return
    found = []
    for path, tree in package.trees():
        for qualname, fn in _public_functions(tree):
            args = fn.args
            for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
                if (arg.arg == "spec" or arg.arg.endswith("_spec")) and _is_any(arg.annotation):
                    shown = "no annotation" if arg.annotation is None else ast.unparse(arg.annotation)
                    found.append(f"{path.relative_to(REPO_ROOT)}:{fn.lineno} {qualname}({arg.arg}: {shown})")
    assert not found, "spec parameters typed Any; import the spec class from t1_spec: " + "; ".join(found)


# --- No function over 150 lines ----------------------------------------------------------------------------

MAX_FUNCTION_LINES = 150

# "file::qualified name"; each being removed by the change that owns its file (none today)
ALLOWED_LONG_FUNCTIONS: set[str] = set()
"""Functions over the limit today that are being split; a split one must leave this set (a test checks)."""


def function_lengths(tree: ast.Module) -> list[tuple[str, int, int]]:
    """``[(qualified name, first line, lines)]`` of every function and method, nested ones too.

    A function's lines run from its ``def`` (decorators excluded) to its last line, ``end_lineno - lineno +
    1``. A nested function is named ``outer.<locals>.inner``, a method ``Class.method``.
    """
    out = []

    def walk(body, prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                name = prefix + node.name
                out.append((name, node.lineno, node.end_lineno - node.lineno + 1))
                walk(node.body, name + ".<locals>.")
            elif isinstance(node, ast.ClassDef):
                walk(node.body, prefix + node.name + ".")
            else:  # if, with, try, match, ...: what they hold belongs to the enclosing scope
                walk(list(ast.iter_child_nodes(node)), prefix)

    walk(tree.body, "")
    return out


def long_functions() -> dict[str, int]:
    """``{"file::qualified name": lines}`` of every function under ``packages/`` over `MAX_FUNCTION_LINES`."""
    out = {}
    for path in sorted((REPO_ROOT / "packages").glob("*/src/**/*.py")):
        where = path.relative_to(REPO_ROOT).as_posix()
        for name, _, lines in function_lengths(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if lines > MAX_FUNCTION_LINES:
                out[f"{where}::{name}"] = lines
    return out


def test_no_function_over_150_lines():
    """A function longer than a screenful or three does several things; each gets its own name."""
    new = {k: v for k, v in long_functions().items() if k not in ALLOWED_LONG_FUNCTIONS}
    assert not new, f"functions over {MAX_FUNCTION_LINES} lines (split them): " + "; ".join(
        f"{k} ({v} lines)" for k, v in sorted(new.items())
    )


def test_the_long_function_allow_list_holds_only_functions_still_too_long():
    stale = sorted(ALLOWED_LONG_FUNCTIONS - long_functions().keys())
    assert not stale, (
        f"allow-listed functions now within {MAX_FUNCTION_LINES} lines or gone; delete their lines from "
        f"ALLOWED_LONG_FUNCTIONS in {Path(__file__).relative_to(REPO_ROOT)}: {stale}"
    )


def test_function_lengths_count_def_to_last_line_and_name_nested_functions():
    source = (
        "@decorator\n"  # not counted
        "def outer():\n"
        "    def inner():\n"
        "        return 1\n"
        "    return inner\n"
        "class C:\n"
        "    if True:\n"
        "        async def method(self):\n"
        "            pass\n"
    )
    assert function_lengths(ast.parse(source)) == [
        ("outer", 2, 4),
        ("outer.<locals>.inner", 3, 2),
        ("C.method", 8, 2),
    ]


# --- One step loop -----------------------------------------------------------------------------------------

T1_PACKAGE = REPO_ROOT / "packages" / "t1" / "src" / "t1"
STEP_LOOP_MODULE = "run/driver.py"
"""The one module of ``t1`` that runs training steps, over every runtime (`t1.run.runtime.Runtime`). The rows
keep every other package out: only ``t1`` imports both the scheduler and the trainer."""
COLLECT = "collect_batch"
"""Rolls out one step's batch (`t1_rollout.scheduler.collect_batch`): what only a step loop calls."""
TRAIN = ("ppo_step", "train_ppo")
"""A PPO step (`t1_trainer.step.ppo_step`), directly or through a runtime (`Runtime.train_ppo`)."""


def referenced_names(tree: ast.Module) -> set[str]:
    """Every name a module reads, calls, imports or takes as an attribute (not its docstrings or comments)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names.update(alias.name.split(".")[-1] for alias in node.names)
    return names


def step_loop_modules(sources: dict[str, str]) -> dict[str, bool]:
    """Which modules run a step loop: ``{module: whether it also trains}`` for each one that collects a batch.

    Args:
        sources: ``{path relative to the t1 package: source}``.
    """
    out = {}
    for where, source in sorted(sources.items()):
        names = referenced_names(ast.parse(source, where))
        if COLLECT in names:
            out[where] = any(name in names for name in TRAIN)
    return out


def t1_sources() -> dict[str, str]:
    """``{path relative to the t1 package: source}`` of every module of ``t1`` (the CLI and ``t1.run``)."""
    paths = sorted(T1_PACKAGE.rglob("*.py"))
    return {p.relative_to(T1_PACKAGE).as_posix(): p.read_text(encoding="utf-8") for p in paths}


def test_one_module_runs_the_training_steps():
    """One step loop over a Runtime seam: only ``t1/run/driver.py`` collects a step's batch and trains on it.

    The runtimes run single trials (`Runtime.run_trial`) and PPO steps (`Runtime.train_ppo`) when asked; a
    second module calling `collect_batch` is a second loop, with its own bookkeeping to drift.
    """
    loops = step_loop_modules(t1_sources())
    assert list(loops) == [STEP_LOOP_MODULE], (
        f"modules of t1 that collect a step's batch ({COLLECT}): {sorted(loops)}; only "
        f"{STEP_LOOP_MODULE} runs steps, the runtimes run what it asks (t1.run.runtime)"
    )
    trains = " or ".join(TRAIN)
    assert loops[STEP_LOOP_MODULE], f"{STEP_LOOP_MODULE} collects batches but trains none (no {trains})"


def test_step_loop_rule_finds_a_second_loop():
    """Two loops, one through a runtime and one calling the trainer, are both found; trials alone are not."""
    sources = {
        "run/driver.py": "async def step(rt):\n    rt.train_ppo(await collect_batch(rt.run_trial))\n",
        "run/ray/loop.py": "from t1_rollout.scheduler import collect_batch\nx = trainer.ppo_step.remote(1)\n",
        "run/inprocess.py": '"""Not collect_batch."""\nasync def run_trial(t):\n    return ppo_step(t)\n',
    }
    assert step_loop_modules(sources) == {"run/driver.py": True, "run/ray/loop.py": True}
