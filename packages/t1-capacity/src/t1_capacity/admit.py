"""Admit or refuse a whole recipe before any work starts: the run's preflight asks here (T1 §7.1, Eq. 21).

The rule is the one ``t1 plan check`` and ``t1 plan search`` apply (``check_plan``, through ``Admission``);
this module only adapts the recipe and words the verdict as one line for the preflight's report.
"""

from __future__ import annotations

from dataclasses import dataclass

from t1_capacity.check import PlanCheck, check_plan
from t1_capacity.recipe import from_recipe
from t1_spec import Recipe


@dataclass(frozen=True)
class RecipeAdmission:
    """The capacity model's verdict on a recipe's plan.

    Attributes:
        ok: whether the plan is admitted (actor and critic fit M under the recipe's offload mode).
        message: one line about the recipe's ``plan`` section (a preflight report prefixes it with
            ``plan: ``): when admitted, the tightest network and its headroom; when refused, the network,
            stage and binding term that exceed M (by how many GiB) and the smallest single change that admits
            the plan; when the plan cannot be laid out at all, the layout error.
        check: the full verdict (both footprints, per term), or None when the plan cannot be laid out.
    """

    ok: bool
    message: str
    check: PlanCheck | None


def admit_recipe(recipe: Recipe) -> RecipeAdmission:
    """Apply the capacity model's admission rule to a validated recipe (T1 §7.1, Eq. 21; T1 §4.5).

    The same rule and the same words as ``t1 plan check``: ``from_recipe``, then ``check_plan`` (which
    searches the smallest fix of a refused plan). Cheap: closed-form arithmetic, no model is built.

    Args:
        recipe: the validated recipe.

    Returns:
        ``ok`` and a one-line ``message``; a plan that cannot be laid out (for instance a ``tp`` that does not
        divide the shared-expert width, a rule the capacity model adds to the spec's) is refused with the
        layout error, never raised.
    """
    try:
        inputs = from_recipe(recipe)
        verdict = check_plan(inputs.model, inputs.plan, inputs.constants)
    except ValueError as exc:  # PlanError and the constants' own range errors, each naming the field
        return RecipeAdmission(False, f"the capacity model cannot lay this plan out: {exc}", None)
    if verdict.fits:
        return RecipeAdmission(True, f"admitted by the capacity model (Eq. 21): {verdict.reason()}", verdict)
    refused = f"refused by the capacity model (Eq. 21): {verdict.reason()}"
    return RecipeAdmission(False, f"{refused}; smallest change: {verdict.advice}", verdict)
