"""Enumerate every valid (tp, pp, cp, dp, ep) for a device count and rank the plans that fit (T1 §7.1).

The paper calibrated Eq. 21 "rather than search the plan space"; with a closed form the search is cheap, so
the whole space is priced and the survivors ranked by the data parallelism they keep (fewer serially
accumulated micro-batches per rank) and their headroom against M.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator
from dataclasses import dataclass, replace

from t1_capacity.check import Admission, admission, verdict
from t1_capacity.footprint import PAPER_CONSTANTS, CapacityConstants
from t1_capacity.plan import Plan, batch_splits_dp_ok, head_counts
from t1_capacity.shapes import ModelShape
from t1_spec.plan import (
    ep_divides_experts_ok,
    expert_region_ok,
    pp_divides_layers_ok,
    token_wall_cp_ok,
    token_wall_tp_ok,
    tp_undivided_heads,
)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def enumerate_plans(model: ModelShape, training_devices: int, base: Plan) -> Iterator[Plan]:
    """Yield every structurally valid plan with tp * pp * cp * dp = ``training_devices``.

    Applies ``t1_spec``'s layout rules through its own predicates, so every plan yielded is one the recipe
    validator accepts: tp divides the attention, KV and Gated DeltaNet head counts and the token wall; pp
    divides the layer count; the token wall is a multiple of 2*cp; ep divides E; etp*ep divides tp*cp*dp;
    dp divides the step's ``batch_size * samples_per_task`` samples (``ppo.batch_splits_dp``; a dp that does
    not would leave ranks with a fractional share of the batch). The capacity model adds: tp divides the
    shared-expert width and etp the expert FFN width. ``etp``, token wall, budget, offload, batch size and
    samples per task come from ``base``.

    Args:
        model: the model shape.
        training_devices: G_train.
        base: supplies the fields not enumerated.

    Yields:
        Plans, tp-major.

    Raises:
        ValueError: when ``training_devices`` < 1.
        TypeError: when ``training_devices`` is not an integer (a bool or a float included).
    """
    if not isinstance(training_devices, numbers.Integral) or isinstance(training_devices, bool):
        raise TypeError(f"training_devices must be an integer, got {training_devices!r}")
    if training_devices < 1:
        raise ValueError(f"training_devices must be >= 1, got {training_devices}")
    g = training_devices
    wall, etp = base.token_wall, base.etp
    heads = head_counts(model)
    experts = [e for e in _divisors(model.num_experts) if ep_divides_experts_ok(e, model.num_experts)] or [1]
    if model.moe_intermediate_size % etp:
        return
    for tp in _divisors(g):
        if tp_undivided_heads(tp, heads) is not None or model.shared_expert_intermediate_size % tp:
            continue
        if not token_wall_tp_ok(wall, tp):
            continue
        for pp in _divisors(g // tp):
            if not pp_divides_layers_ok(pp, model.num_layers):
                continue
            for cp in _divisors(g // (tp * pp)):
                if not token_wall_cp_ok(wall, cp):
                    continue
                dp = g // (tp * pp * cp)
                if not batch_splits_dp_ok(replace(base, dp=dp)):
                    continue
                for ep in experts:
                    if expert_region_ok(tp, cp, dp, ep, etp):
                        yield replace(base, tp=tp, pp=pp, cp=cp, dp=dp, ep=ep)


@dataclass(frozen=True)
class Candidate:
    """One priced plan.

    Admission and headroom are the admission rule's (``t1_capacity.check.admission``), the same that
    ``check_plan`` applies: under ``offload="none"`` the co-resident actor + critic total must fit M.

    Attributes:
        plan: the plan.
        admitted: the admission rule's verdict on it.
    """

    plan: Plan
    admitted: Admission

    @property
    def actor_gib(self) -> float:
        """The actor's binding-stage total, GiB."""
        return self.admitted.actor_gib

    @property
    def critic_gib(self) -> float:
        """The critic's binding-stage total, GiB (0 without a critic)."""
        return self.admitted.critic_gib

    @property
    def fits(self) -> bool:
        """Admitted or not."""
        return self.admitted.fits

    @property
    def headroom_gib(self) -> float:
        """M minus what must fit (co-resident total, or the larger network under forced offload), GiB."""
        return self.admitted.headroom_gib

    def explain(self, model: ModelShape, c: CapacityConstants) -> str:
        """Why the plan is refused (or that it fits): ``PlanCheck.reason`` of the same plan, word for word."""
        return verdict(model, self.plan, c).reason()


@dataclass(frozen=True)
class SearchResult:
    """All priced plans of one search.

    Attributes:
        training_devices: G_train searched.
        fitting: admitted plans, best first.
        refused: refused plans, closest to fitting first.
    """

    training_devices: int
    fitting: tuple[Candidate, ...]
    refused: tuple[Candidate, ...]

    @property
    def n_plans(self) -> int:
        """How many valid plans were priced."""
        return len(self.fitting) + len(self.refused)


RANKINGS = ("dp", "headroom")


def search_plans(
    model: ModelShape,
    base: Plan,
    c: CapacityConstants = PAPER_CONSTANTS,
    training_devices: int | None = None,
    rank: str = "dp",
    ep_maximal_only: bool = False,
) -> SearchResult:
    """Price every valid plan for the training devices and rank the admitted ones (T1 §7.1).

    Args:
        model: the model shape.
        base: the recipe's plan; its token wall, budget, offload, batch size, samples per task and etp are
            kept.
        c: the constants.
        training_devices: G_train; default ``base.training_devices``.
        rank: ``"dp"``: most data parallelism kept (fewest micro-batches per rank) first, ties by headroom;
            ``"headroom"``: most headroom first, ties by dp.
        ep_maximal_only: keep only the largest valid ep per (tp, pp, cp, dp) (Prop. 7.1 pins ep maximal).

    Returns:
        The fitting plans ranked, and the refused plans ordered by how little they miss M.

    Raises:
        ValueError: unknown ``rank``, or ``training_devices`` < 1.
        TypeError: ``training_devices`` not an integer (a bool or a float included).
    """
    if rank not in RANKINGS:
        raise ValueError(f"rank must be one of {RANKINGS}, got {rank!r}")
    g = base.training_devices if training_devices is None else training_devices
    fitting: list[Candidate] = []
    refused: list[Candidate] = []
    plans = list(enumerate_plans(model, g, base))
    if ep_maximal_only:
        best: dict[tuple[int, int, int, int], Plan] = {}
        for p in plans:
            key = (p.tp, p.pp, p.cp, p.dp)
            if key not in best or p.ep > best[key].ep:
                best[key] = p
        plans = list(best.values())
    for p in plans:
        cand = Candidate(p, admission(model, p, c))
        (fitting if cand.fits else refused).append(cand)
    if rank == "dp":
        fitting.sort(key=lambda x: (-x.plan.dp, -x.headroom_gib, x.plan.tp, x.plan.pp))
    else:
        fitting.sort(key=lambda x: (-x.headroom_gib, -x.plan.dp))
    refused.sort(key=lambda x: (-x.headroom_gib, -x.plan.dp))
    return SearchResult(g, tuple(fitting), tuple(refused))
