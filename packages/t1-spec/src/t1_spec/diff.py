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


def _walk(a: Any, b: Any, prefix: str, out: list[Change]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        keys = list(b)
        for k in a:  # keys only the base has go right after their preceding sibling
            if k not in b:
                prev = list(a).index(k)
                anchor = next((x for x in reversed(list(a)[:prev]) if x in keys), None)
                keys.insert(keys.index(anchor) + 1 if anchor is not None else 0, k)
        for k in keys:
            _walk(a.get(k, ABSENT), b.get(k, ABSENT), f"{prefix}.{k}" if prefix else str(k), out)
    elif a != b:
        out.append(Change(prefix, a, b))


def diff_recipes(base: Recipe, new: Recipe) -> list[Change]:
    """Every field whose resolved value (defaults included) differs between ``base`` and ``new``.

    Sections present on both sides are compared field by field; a section that is a mapping on one side and
    not on the other (``critic_warmup.pool: null``) is one change. A key only one side has (``reward.scale``
    after ``reward.kind`` changes) shows ``ABSENT`` on the other side.

    Returns:
        the changes in recipe order.
    """
    out: list[Change] = []
    _walk(recipe_to_dict(base), recipe_to_dict(new), "", out)
    return out
