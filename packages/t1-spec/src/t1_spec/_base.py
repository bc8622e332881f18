"""The base class every T1 spec derives from, and the rule-violation types the validators raise."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict


class Spec(BaseModel):
    """Base of every T1 spec: frozen; unknown keys, inf and NaN refused; field docstrings documented."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        use_attribute_docstrings=True,
        validate_default=True,
        populate_by_name=True,
        # an infinite learning rate or deadline is never meant; NaN is refused too
        allow_inf_nan=False,
    )


@dataclass(frozen=True)
class Violation:
    """One broken cross-field rule (or one advisory, when non-fatal).

    Attributes:
        rule: stable rule id, e.g. ``"plan.device_product"``; tests and docs refer to rules by it.
        field: dotted path of the field to change, relative to the model that checked it (``"tp"`` inside
            ``PlanSpec``; the loader prefixes the section, giving ``"plan.tp"``).
        message: what is wrong and what to change.
    """

    rule: str
    field: str
    message: str


class SpecRuleError(ValueError):
    """Raised inside a model validator when one or more cross-field rules are broken.

    Pydantic wraps it into a ``ValidationError``; the loader unwraps it again (``ctx["error"]``) to report
    each violation with its own field path.

    Args:
        violations: every broken rule found in one pass over the model (at least one).
    """

    def __init__(self, violations: list[Violation]) -> None:
        self.violations = list(violations)
        super().__init__("; ".join(f"{v.field}: {v.message} [{v.rule}]" for v in self.violations))


def raise_if(violations: list[Violation]) -> None:
    """Raise ``SpecRuleError`` when ``violations`` is not empty.

    Raises:
        SpecRuleError: carrying every violation.
    """
    if violations:
        raise SpecRuleError(violations)
