"""What one recipe changes against another, field by field (for ``t1 recipe diff``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from t1_spec.loading import recipe_to_dict
from t1_spec.recipe import Recipe


class _Absent:
    def __repr__(self) -> str:
        return "(absent)"


ABSENT: Any = _Absent()
"""Stands for a key one side does not have (e.g. ``reward.scale`` after ``reward.kind`` changes)."""


@dataclass(frozen=True)
class Change:
    """One differing leaf.

    Attributes:
        field: dotted path, e.g. ``"reward.kind"``.
        base: value in the base recipe, or ``ABSENT``.
        new: value in the compared recipe, or ``ABSENT``.
    """

    field: str
    base: Any
    new: Any


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Leaves of a nested dict as ``{"a.b.c": value}``; lists are leaves."""
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        if not tree and prefix:
            out[prefix] = {}
        for key, value in tree.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: tree}


def diff_recipes(base: Recipe, new: Recipe) -> list[Change]:
    """Every field whose resolved value (defaults included) differs between ``base`` and ``new``.

    Returns:
        changes in ``new``'s field order, then fields only ``base`` has.
    """
    a, b = flatten(recipe_to_dict(base)), flatten(recipe_to_dict(new))
    changes = [Change(k, a.get(k, ABSENT), v) for k, v in b.items() if a.get(k, ABSENT) != v]
    changes += [Change(k, v, ABSENT) for k, v in a.items() if k not in b]
    return changes
