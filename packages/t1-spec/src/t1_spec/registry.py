"""Backend registries: a recipe's ``kind:`` value -> the class that implements it, imported on first use.

Each seam (engine, sandbox, trainer backend, advantage estimator) keeps one `Registry` beside its protocol.
Adding a backend is one module and one entry; a kind the spec accepts but no entry implements is refused by
`Registry.load`, once, in one wording, naming the recipe field. Entries are ``"package.module:Attribute"``
strings, so building the table imports nothing heavy (torch, docker, ray stay unimported until chosen).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


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

    Raises:
        ValueError: an entry is not of the form ``"module:Attribute"``.
    """

    field: str
    entries: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for kind, target in self.entries.items():
            module, sep, attr = target.partition(":")
            if not (module and sep and attr):
                raise ValueError(
                    f"registry {self.field}: entry {kind!r} -> {target!r} is not 'module:Attribute'"
                )

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
        module, _, attr = self.entries[kind].partition(":")
        return getattr(importlib.import_module(module), attr)
