"""Static count of a verifier's assertions: the pytest test items its ``tests/*.py`` files define.

One pytest test item is one assertion (T1 §5.2: P and T count assertions; the verifier's CTRF report has one
entry per test item). The count is read from the source with ``ast`` (nothing is imported or run) and mirrors
pytest's default collection:

- test functions: ``def test*`` / ``async def test*`` at module level (a name defined twice counts once, as
  the later definition replaces the earlier one);
- test methods: ``def test*`` inside a ``class Test*`` that has no ``__init__`` (pytest skips such classes)
  and no base class other than ``object``; ``Test*`` classes nested in a ``Test*`` class are counted too;
- parametrization: each item is multiplied by the number of cases of every literal
  ``@pytest.mark.parametrize(argnames, [case, ...])`` on it, on its class, or in a module- or class-level
  ``pytestmark``; stacked decorators multiply, and a ``pytest.param(...)`` entry is one case.

Every ``*.py`` file under ``tests/`` is read except ``conftest.py`` (pytest collects no tests from it; it is
still read for fixture ``params`` and ``pytest_generate_tests``). The count is *unknown* (``None``) when it
cannot be known without running pytest: ``parametrize`` over a non-literal (a name, ``range(...)``, a
comprehension, an empty list), a ``parametrize`` mark not applied directly as a decorator or ``pytestmark``,
a fixture with ``params=``, a ``pytest_generate_tests`` hook, a ``unittest.TestCase`` subclass, a ``Test*``
class with a base class, a test defined under ``if``/``try``/``with``/``for`` at module level, or ``__test__``
set in a module or class. Callers then take the count from the verifier's report.

`defined_tests` lists the qualified names of those tests per file (the verifier's report may name no
other; ``t1_reward.check_report``), and `known_assertion_count` picks the count a report is held to: the one
``t1 tasks validate`` observed, else the static one.

Source: pytest's default ``python_functions = test``, ``python_classes = Test`` collection rules and
``Metafunc.parametrize`` (one item per argvalues entry); T1 §5.2 (per-assertion report).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from t1_tasks.validation import TaskRecord

__all__ = ["count_test_items", "defined_tests", "known_assertion_count"]


class _Unknown(Exception):
    """The count depends on something only pytest's collection can evaluate (the message says what)."""


def _dotted(node: ast.expr) -> str:
    """``a.b.c`` for an attribute chain of names; ``""`` for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    parts.append(node.id)
    return ".".join(reversed(parts))


def _is_parametrize_call(node: ast.AST) -> bool:
    """``pytest.mark.parametrize(...)`` (or ``mark.parametrize(...)`` after ``from pytest import mark``)."""
    if not isinstance(node, ast.Call):
        return False
    name = _dotted(node.func)
    return name == "mark.parametrize" or name.endswith(".mark.parametrize")


def _cases(call: ast.Call, where: str) -> int:
    """Number of cases of one ``parametrize`` call: the length of its literal ``argvalues``.

    Raises:
        _Unknown: ``argvalues`` is not a non-empty list or tuple literal without ``*`` unpacking.
    """
    argvalues: ast.expr | None = call.args[1] if len(call.args) >= 2 else None
    for kw in call.keywords:
        if kw.arg is None:
            raise _Unknown(f"{where}: parametrize with **kwargs")
        if kw.arg == "argvalues":
            argvalues = kw.value
    if (
        isinstance(argvalues, ast.List | ast.Tuple)
        and argvalues.elts
        and not any(isinstance(e, ast.Starred) for e in argvalues.elts)
    ):
        return len(argvalues.elts)
    raise _Unknown(f"{where}: parametrize over a non-literal or empty argvalues")


def _marks_factor(marks: list[ast.expr], used: set[int], where: str) -> int:
    """Product of the case counts of the ``parametrize`` marks among ``marks``; other marks count 1."""
    factor = 1
    for mark in marks:
        if _is_parametrize_call(mark):
            assert isinstance(mark, ast.Call)
            factor *= _cases(mark, f"{where}:{mark.lineno}")
            used.add(id(mark))
    return factor


def _pytestmark(body: list[ast.stmt], used: set[int], where: str) -> int:
    """Factor of a ``pytestmark = mark`` or ``pytestmark = [mark, ...]`` assignment in ``body``."""
    factor = 1
    for stmt in body:
        if not isinstance(stmt, ast.Assign | ast.AnnAssign) or stmt.value is None:
            continue
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        names = {t.id for t in targets if isinstance(t, ast.Name)}
        if "__test__" in names:
            raise _Unknown(f"{where}:{stmt.lineno}: __test__ is set")
        if "pytestmark" not in names:
            continue
        value = stmt.value
        marks = list(value.elts) if isinstance(value, ast.List | ast.Tuple) else [value]
        if not all(isinstance(m, ast.Call | ast.Attribute) for m in marks):
            raise _Unknown(f"{where}:{stmt.lineno}: pytestmark is not a literal mark or list of marks")
        factor *= _marks_factor(marks, used, where)
    return factor


def _is_test_function(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name.startswith("test")


def _count_class(cls: ast.ClassDef, used: set[int], where: str) -> int:
    """Test items of one ``Test*`` class (0 when pytest would not collect it)."""
    if any(_dotted(b) != "object" for b in cls.bases) or cls.keywords:
        raise _Unknown(f"{where}:{cls.lineno}: class {cls.name} has a base class (inherited tests)")
    if any(isinstance(s, ast.FunctionDef) and s.name == "__init__" for s in cls.body):
        return 0  # pytest: "cannot collect test class because it has a __init__ constructor"
    factor = _marks_factor(cls.decorator_list, used, where) * _pytestmark(cls.body, used, where)
    return factor * _count_body(cls.body, used, where)


def _count_body(body: list[ast.stmt], used: set[int], where: str) -> int:
    """Test items defined directly in a module's or a class's ``body`` (later definitions win)."""
    items: dict[str, int] = {}
    for stmt in body:
        if _is_test_function(stmt):
            assert isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef)
            items[stmt.name] = _marks_factor(stmt.decorator_list, used, where)
        elif isinstance(stmt, ast.ClassDef):
            if any(_dotted(b).endswith("TestCase") for b in stmt.bases):
                raise _Unknown(f"{where}:{stmt.lineno}: unittest.TestCase subclass {stmt.name}")
            if stmt.name.startswith("Test"):
                items[stmt.name] = _count_class(stmt, used, where)
            else:
                items.pop(stmt.name, None)
        elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            items.pop(stmt.name, None)
        elif any(
            (_is_test_function(n) or (isinstance(n, ast.ClassDef) and n.name.startswith("Test")))
            for n in ast.walk(stmt)
        ):
            raise _Unknown(f"{where}:{stmt.lineno}: a test defined under {type(stmt).__name__}")
    return sum(items.values())


def _defines_tests(tree: ast.AST) -> bool:
    """Any ``def test*`` anywhere in ``tree`` (whether or not pytest would collect it)."""
    return any(_is_test_function(n) for n in ast.walk(tree) if isinstance(n, ast.stmt))


def _count_tree(tree: ast.Module, filename: str, *, collect: bool) -> int:
    """Test items of one parsed file (see the module docstring).

    Raises:
        _Unknown: the count cannot be known statically.
    """
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "pytest_generate_tests":
            raise _Unknown(f"{filename}:{node.lineno}: pytest_generate_tests hook")
        if (
            isinstance(node, ast.Call)
            and _dotted(node.func).endswith("fixture")
            and any(kw.arg in ("params", None) for kw in node.keywords)
        ):
            raise _Unknown(f"{filename}:{node.lineno}: fixture with params")
    if not collect:
        return 0
    used: set[int] = set()
    n = _pytestmark(tree.body, used, filename) * _count_body(tree.body, used, filename)
    # A parametrize mark bound to a name, built in a function, ...: its target is not known statically.
    mentions = sum(
        (isinstance(node, ast.Attribute) and node.attr == "parametrize")
        or (isinstance(node, ast.Name) and node.id == "parametrize")
        for node in ast.walk(tree)
    )
    if mentions != len(used):
        raise _Unknown(f"{filename}: a parametrize mark not applied directly as a decorator or pytestmark")
    return n


def count_test_items(files: dict[str, str]) -> int | None:
    """Test items (assertions) that a verifier's pytest files define, counted statically.

    See the module docstring for what is counted and when the count is unknown.

    Args:
        files: relative path of each ``*.py`` file under ``tests/`` to its source. ``conftest.py`` files are
            read only for what makes the count unknown (fixture ``params``, ``pytest_generate_tests``).

    Returns:
        The number of test items; 0 when no file defines a ``def test*`` function; None when some are
        defined but their number cannot be known without running pytest.

    Raises:
        SyntaxError: a file is not valid Python (its ``filename`` and ``lineno`` say where).
    """
    trees = {name: ast.parse(source, filename=name) for name, source in files.items()}
    if not any(_defines_tests(tree) for tree in trees.values()):
        return 0
    try:
        return sum(
            _count_tree(tree, name, collect=Path(name).name != "conftest.py") for name, tree in trees.items()
        )
    except _Unknown:
        return None


def _qualnames(body: list[ast.stmt], prefix: tuple[str, ...], out: set[str], where: str) -> None:
    """Collect ``Class::test`` names of ``body`` into ``out``, looking through ``if``/``try``/``with``."""
    for stmt in body:
        if _is_test_function(stmt):
            assert isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef)
            out.add("::".join((*prefix, stmt.name)))
        elif isinstance(stmt, ast.ClassDef):
            if not stmt.name.startswith("Test"):
                continue
            bases = [_dotted(b) for b in stmt.bases]
            if any(b not in ("object", "TestCase", "unittest.TestCase") for b in bases) or stmt.keywords:
                raise _Unknown(f"{where}:{stmt.lineno}: class {stmt.name} has a base class (inherited tests)")
            _qualnames(stmt.body, (*prefix, stmt.name), out, where)
        elif isinstance(stmt, ast.ImportFrom) and not prefix:
            for alias in stmt.names:
                if alias.name == "*":
                    raise _Unknown(f"{where}:{stmt.lineno}: a star import may bring tests in")
                name = alias.asname or alias.name
                if name.startswith(("test", "Test")):
                    raise _Unknown(f"{where}:{stmt.lineno}: test {name} imported from another module")
        elif isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
            if any(n.startswith(("test", "Test")) for n in names):
                raise _Unknown(f"{where}:{stmt.lineno}: a test name bound by assignment")
        elif isinstance(stmt, ast.If | ast.Try | ast.With | ast.For | ast.While):
            for block in ("body", "orelse", "finalbody", "handlers"):
                for part in getattr(stmt, block, []):
                    _qualnames(
                        part.body if isinstance(part, ast.ExceptHandler) else [part], prefix, out, where
                    )


def defined_tests(files: dict[str, str]) -> dict[str, frozenset[str]] | None:
    """The tests each pytest file defines, by qualified name: ``test_x``, ``TestY::test_z`` (no parameters).

    A superset of what pytest collects (a test under ``if`` counts whether or not the branch runs), so that
    a name the verifier's report gives and this does not is a test that no file of the task defines.

    Args:
        files: relative path of each ``*.py`` file under ``tests/`` to its source; ``conftest.py`` files
            define no tests and are left out.

    Returns:
        Relative path to the set of qualified test names (files without tests included, empty); None when
        the names cannot be known without running pytest: a ``Test*`` class with a base class other than
        ``unittest.TestCase`` (inherited tests), a star import or an imported ``test*`` name, or a ``test*``
        name bound by assignment.

    Raises:
        SyntaxError: a file is not valid Python (its ``filename`` and ``lineno`` say where).
    """
    out: dict[str, frozenset[str]] = {}
    try:
        for name, source in files.items():
            if Path(name).name == "conftest.py":
                continue
            names: set[str] = set()
            _qualnames(ast.parse(source, filename=name).body, (), names, name)
            out[name] = frozenset(names)
    except _Unknown:
        return None
    return out


def known_assertion_count(static: int | None, record: TaskRecord | None = None) -> int | None:
    """The assertion count a verifier report of the task is held to (T1 §5.2: P counts assertions).

    Args:
        static: the static count of the task's ``tests/*.py`` (``Task.n_assertions``; None when unknown).
        record: the task's row of a validation record (``ValidationRecord.get(task_id)`` of a record that
            ``t1_tasks.record_for`` accepted for the pool), or None.

    Returns:
        The oracle's reported count when the record has one (``TaskRecord.observed_assertions``: what the
        task's own verifier reported for the reference solution), else ``static``; None when neither is
        known.
    """
    observed = record.observed_assertions if record is not None else None
    return observed if observed is not None else static
