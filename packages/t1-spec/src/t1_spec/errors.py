"""The typed error every recipe problem is reported as."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a recipe.

    Attributes:
        field: dotted path from the recipe root, e.g. ``"ppo.clip_eps"``; ``""`` for the file as a whole.
        message: what is wrong and what to change.
        rule: rule id for cross-field rules (e.g. ``"plan.device_product"``), else the pydantic error type.
    """

    field: str
    message: str
    rule: str = ""


class RecipeError(Exception):
    """A recipe that cannot be loaded or does not validate.

    Attributes:
        path: the recipe file the problem was found in (``None`` for recipes built in memory).
        field: dotted path of the first problem (``"ppo.clip_eps"``), ``""`` when it concerns the whole file.
        problems: every problem found, in order (at least one).
    """

    def __init__(self, path: str | Path | None, problems: list[Problem]) -> None:
        if not problems:
            raise ValueError("RecipeError needs at least one problem")
        self.path = Path(path) if path is not None else None
        self.problems = list(problems)
        self.field = problems[0].field
        super().__init__(self._render())

    def _render(self) -> str:
        where = str(self.path) if self.path is not None else "<recipe>"
        if len(self.problems) == 1:
            p = self.problems[0]
            return f"{where}: {p.field + ': ' if p.field else ''}{p.message}"
        lines = [f"{where}: {len(self.problems)} problems"]
        lines += [f"  - {p.field + ': ' if p.field else ''}{p.message}" for p in self.problems]
        return "\n".join(lines)
