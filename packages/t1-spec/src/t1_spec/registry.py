"""Backend registries: a recipe's ``kind:`` value -> the class that implements it, imported on first use.

Each seam (engine, sandbox, trainer backend, advantage estimator) keeps one `Registry` beside its protocol.
Adding a backend is one module and one entry; a kind the spec accepts but no entry implements is refused by
`Registry.load`, once, in one wording, naming the recipe field. Entries are ``"package.module:Attribute"``
strings, so building the table imports nothing heavy (torch, docker, ray stay unimported until chosen).

A backend whose module imports a heavy library at import time (the torch trainer, the embedded engine) may
also name a light preflight function in ``checks``; `Registry.preflight` calls it instead of importing the
backend's module, so `t1 recipe validate` answers without importing torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from t1_spec.recipe import Recipe


class BackendNotBuilt(NotImplementedError):
    """A recipe names a ``kind`` that the spec accepts but no registered backend implements.

    Attributes:
        field: the recipe path of the discriminator, e.g. ``"sandbox.kind"``.
        kind: the value the recipe gave.
    """

    def __init__(self, field: str, kind: str, registered: tuple[str, ...]) -> None:
        self.field = field
        self.kind = kind
        super().__init__(
            f"{field} '{kind}': no backend for it is built in this version of T1 "
            f"(built: {', '.join(registered) or 'none'})"
        )


@dataclass(frozen=True)
class Registry:
    """``kind -> implementation`` for one seam.

    Args:
        field: the recipe path of the discriminator this registry resolves (``"engine.kind"``).
        entries: ``kind -> "package.module:Attribute"``; the attribute is imported by `load`.
        checks: ``kind -> "package.module:function"``, for kinds whose module is heavy to import: a function
            ``(recipe) -> list[str]`` in a light module that gives the same lines as the class's
            ``preflight``; `preflight` uses it instead of `load`.

    Raises:
        ValueError: an entry or a check is not of the form ``"module:Attribute"``, or a check names a kind
            that has no entry.
    """

    field: str
    entries: Mapping[str, str] = field(default_factory=dict)
    checks: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for table, targets in (("entry", self.entries), ("check", self.checks)):
            for kind, target in targets.items():
                module, sep, attr = target.partition(":")
                if not (module and sep and attr):
                    raise ValueError(
                        f"registry {self.field}: {table} {kind!r} -> {target!r} is not 'module:Attribute'"
                    )
        orphans = sorted(set(self.checks) - set(self.entries))
        if orphans:
            raise ValueError(f"registry {self.field}: checks for kinds with no entry: {', '.join(orphans)}")

    def kinds(self) -> tuple[str, ...]:
        """The kinds that have a backend, in registration order."""
        return tuple(self.entries)

    def problem(self, kind: str) -> str | None:
        """The one-line refusal for ``kind`` (``None`` when a backend is registered for it)."""
        if kind in self.entries:
            return None
        return str(BackendNotBuilt(self.field, kind, self.kinds()))

    def load(self, kind: str) -> Any:
        """Import and return the implementation registered for ``kind``.

        Raises:
            BackendNotBuilt: no backend is registered for ``kind``.
        """
        if kind not in self.entries:
            raise BackendNotBuilt(self.field, kind, self.kinds())
        return _resolve(self.entries[kind])

    def preflight(self, kind: str, recipe: Recipe) -> list[str]:
        """What the backend of ``kind`` cannot run of ``recipe`` here, one line each (empty: runnable).

        The light function of ``checks`` when ``kind`` has one, else the class's ``preflight(recipe)``
        (which imports the backend's module).

        Raises:
            BackendNotBuilt: no backend is registered for ``kind``.
        """
        if kind in self.checks:
            return _resolve(self.checks[kind])(recipe)
        return self.load(kind).preflight(recipe)


def _resolve(target: str) -> Any:
    """Import ``"package.module:Attribute"`` and return the attribute."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)
