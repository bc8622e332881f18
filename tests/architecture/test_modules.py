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
