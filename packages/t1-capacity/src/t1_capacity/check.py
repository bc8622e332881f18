"""Admit or refuse a plan: actor and critic each against M, the binding term, the smallest fix (T1 §7.1)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from t1_capacity.footprint import (
    ACTOR,
    CRITIC,
    GIB,
    PAPER_CONSTANTS,
    CapacityConstants,
    Footprint,
    allocator_residue_bytes,
    distinct_stages,
    footprint,
    stage_total_bytes_fast,
    stages,
    total_gib_fast,
)
from t1_capacity.plan import Plan, batch_splits_dp_ok, plan_problems, validate_plan
from t1_capacity.shapes import ModelShape


@dataclass(frozen=True)
class Admission:
    """The admission rule's verdict on one plan: what must fit M, and by how much it clears or misses it.

    The one copy of the rule (T1 §7.1, Eq. 21; T1 §4.5): under ``offload="forced"`` actor and critic
    time-share the devices, so each must fit M alone and the larger binds; under ``offload="none"`` both stay
    resident, so their per-stage sum with one allocator residue must fit. ``check_plan``, ``search_plans``
    and ``smallest_fix`` all decide and rank through it.

    Attributes:
        actor_gib: the actor's binding-stage total, GiB.
        critic_gib: the critic's binding-stage total, GiB; 0 when the run trains no critic (GRPO).
        coresident_gib: with ``offload="none"``, the largest per-stage actor + critic total (one b0), GiB;
            None under forced offload.
        budget_gib: M, GiB.
    """

    actor_gib: float
    critic_gib: float
    coresident_gib: float | None
    budget_gib: float

    @property
    def needed_gib(self) -> float:
        """What must fit M, GiB: the co-resident total, or the larger network under forced offload."""
        if self.coresident_gib is not None:
            return self.coresident_gib
        return max(self.actor_gib, self.critic_gib)

    @property
    def headroom_gib(self) -> float:
        """M minus ``needed_gib``, GiB (negative when the plan is refused)."""
        return self.budget_gib - self.needed_gib

    @property
    def fits(self) -> bool:
        """Whether the plan is admitted: ``needed_gib`` <= M."""
        return self.needed_gib <= self.budget_gib

    def describe(self) -> str:
        """The figures, e.g. ``actor 10.3 GiB, critic 4.3 GiB, co-resident 11.6 GiB, headroom 83.4 GiB``."""
        co = "" if self.coresident_gib is None else f", co-resident {self.coresident_gib:.1f} GiB"
        return (
            f"actor {self.actor_gib:.1f} GiB, critic {self.critic_gib:.1f} GiB{co}, "
            f"headroom {self.headroom_gib:.1f} GiB"
        )


def admission(model: ModelShape, plan: Plan, c: CapacityConstants = PAPER_CONSTANTS) -> Admission:
    """Apply the admission rule to a valid plan (see ``Admission``), without building footprints.

    Args:
        model: the model shape.
        plan: the plan (assumed valid; ``check_plan`` validates it first).
        c: the constants.

    Returns:
        The ``Admission``: totals in GiB, the verdict and the headroom against M.
    """
    a = total_gib_fast(model, plan, c, ACTOR)
    k = total_gib_fast(model, plan, c, CRITIC) if plan.critic else 0.0
    co = coresident_gib(model, plan, c) if plan.offload == "none" else None
    return Admission(a, k, co, plan.memory_budget_gib)


@dataclass(frozen=True)
class PlanCheck:
    """The verdict on one plan.

    Attributes:
        plan: the plan checked.
        actor: the actor's binding-stage footprint.
        critic: the critic's binding-stage footprint, or None when the run trains no critic (GRPO).
        admitted: the admission rule's verdict (``admission``); ``fits``, ``headroom_gib`` and
            ``coresident_gib`` read it, so check and search can never disagree.
        advice: when refused, the smallest change found that admits the plan (or why none was found); None
            when admitted or when the verdict was built without advice (``verdict``).
    """

    plan: Plan
    actor: Footprint
    critic: Footprint | None
    admitted: Admission
    advice: str | None

    @property
    def fits(self) -> bool:
        """Whether the plan is admitted (``Admission.fits``)."""
        return self.admitted.fits

    @property
    def headroom_gib(self) -> float:
        """M minus what must fit (the co-resident total, or the larger network), GiB; negative if refused."""
        return self.admitted.headroom_gib

    @property
    def coresident_gib(self) -> float | None:
        """With ``offload="none"``, the largest per-stage actor + critic total (one b0), GiB; else None."""
        return self.admitted.coresident_gib

    @property
    def binding(self) -> Footprint:
        """The network with the smaller headroom."""
        nets = [f for f in (self.actor, self.critic) if f is not None]
        return min(nets, key=lambda f: f.headroom_gib)

    def reason(self) -> str:
        """One sentence: which network and term bind, and by how much the plan misses or clears M."""
        f = self.binding
        head = self.headroom_gib
        if self.coresident_gib is not None:
            state = f"exceeds M by {-head:.1f} GiB" if head < 0 else f"fits with {head:.1f} GiB headroom"
            who = "actor + critic co-resident" if self.critic is not None else "actor (no critic)"
            return (
                f"{who} (offload none): {self.coresident_gib:.1f} of {f.budget_gib:.1f} GiB, {state}; "
                f"largest term {f.network} {f.binding.name} ({f.binding.gib:.1f} GiB)"
            )
        if self.fits:
            return (
                f"fits: tightest is the {f.network} on stage {f.stage}, {f.total_gib:.1f} of "
                f"{f.budget_gib:.1f} GiB ({head:.1f} GiB headroom), largest term "
                f"{f.binding.name} ({f.binding.gib:.1f} GiB)"
            )
        return (
            f"{f.network} exceeds M on stage {f.stage}: {f.total_gib:.1f} > {f.budget_gib:.1f} GiB "
            f"(by {-head:.1f} GiB); binding term {f.binding.name} = {f.binding.gib:.1f} GiB "
            f"({100 * f.binding.bytes / f.budget_bytes:.0f}% of M)"
        )


def coresident_gib(model: ModelShape, plan: Plan, c: CapacityConstants) -> float:
    """Largest per-stage actor + critic total, allocator residue counted once (offload ``"none"``), GiB."""
    worst = 0.0
    for s in distinct_stages(model, plan.pp):
        total = stage_total_bytes_fast(model, plan, s, c, ACTOR)
        if plan.critic:
            total += stage_total_bytes_fast(model, plan, s, c, CRITIC) - allocator_residue_bytes(c)
        worst = max(worst, total)
    return worst / GIB


def max_expert_parallel(model: ModelShape, plan: Plan) -> int:
    """Largest ep dividing both E and tp*cp*dp/etp (T1 §7.1: ep is pinned maximal)."""
    region = plan.tp * plan.cp * plan.dp
    if region % plan.etp or model.num_experts == 0:
        return 1
    region //= plan.etp
    return max(e for e in range(1, model.num_experts + 1) if model.num_experts % e == 0 and region % e == 0)


def _neighbours(model: ModelShape, plan: Plan) -> list[tuple[str, Plan]]:
    """Single-lever changes at the same device count: ep to its maximum, or cp/pp/tp x2-8 taking dp down."""
    out: list[tuple[str, Plan]] = []
    ep_max = max_expert_parallel(model, plan)
    if ep_max > plan.ep:
        out.append((f"raise ep {plan.ep} -> {ep_max}", replace(plan, ep=ep_max)))
    for lever in ("cp", "pp", "tp"):
        for factor in (2, 4, 8):
            if plan.dp % factor:
                continue
            new = replace(plan, **{lever: getattr(plan, lever) * factor, "dp": plan.dp // factor})
            new = replace(new, ep=min(new.ep, max(1, max_expert_parallel(model, new))))
            if plan_problems(new, model) or not batch_splits_dp_ok(new):
                continue
            new = replace(new, ep=max_expert_parallel(model, new))
            desc = f"raise {lever} {getattr(plan, lever)} -> {getattr(new, lever)} (dp {plan.dp} -> {new.dp})"
            if new.ep != plan.ep:
                desc += f", ep {plan.ep} -> {new.ep}"
            out.append((desc, new))
    return out


def max_token_wall(
    model: ModelShape, plan: Plan, c: CapacityConstants = PAPER_CONSTANTS, step: int = 1024
) -> int:
    """Largest token wall (a multiple of ``step``) at which ``plan`` fits, or 0 if none does (bisection).

    Every term is non-decreasing in the token wall, so the admissible walls form an interval from 0.
    """
    lo, hi = 0, max(1, plan.token_wall // step)
    if admission(model, replace(plan, token_wall=hi * step), c).fits:
        return hi * step
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if admission(model, replace(plan, token_wall=mid * step), c).fits:
            lo = mid
        else:
            hi = mid
    return lo * step


def smallest_fix(model: ModelShape, plan: Plan, c: CapacityConstants = PAPER_CONSTANTS) -> str:
    """Describe the cheapest single change that admits a refused plan.

    Cheapest = keeps the most data parallelism, then leaves the most headroom. A lower token wall is always
    offered as the alternative that keeps the layout.
    """
    admitted = []
    for desc, new in _neighbours(model, plan):
        adm = admission(model, new, c)
        if adm.fits:
            admitted.append((new.dp, adm.headroom_gib, desc, adm))
    wall = max_token_wall(model, plan, c)
    wall_txt = f"lower token_wall {plan.token_wall} -> {wall}" if wall else "no token wall admits this layout"
    if not admitted:
        return (
            f"no single change of ep/cp/pp/tp at {plan.training_devices} training devices admits it; "
            f"{wall_txt}"
        )
    admitted.sort(key=lambda t: (-t[0], -t[1]))
    _dp, _head, desc, adm = admitted[0]
    return f"{desc}: {adm.describe()}; or {wall_txt}"


def check_plan(model: ModelShape, plan: Plan, c: CapacityConstants = PAPER_CONSTANTS) -> PlanCheck:
    """Check actor and critic against M under ``plan`` (T1 §7.1, Eq. 21; forced offload per T1 §4.5).

    Args:
        model: the model shape.
        plan: the plan to check.
        c: the constants.

    Returns:
        The verdict with both footprints and, when refused, the smallest fix.

    Raises:
        PlanError: when the plan cannot be laid out at all (see ``t1_capacity.plan.validate_plan``).
    """
    _check_types(model, plan, c)
    validate_plan(model=model, plan=plan)
    stages(model, plan.pp)
    v = verdict(model, plan, c)
    return v if v.fits else replace(v, advice=smallest_fix(model, plan, c))


def verdict(model: ModelShape, plan: Plan, c: CapacityConstants = PAPER_CONSTANTS) -> PlanCheck:
    """The ``PlanCheck`` of a valid plan without the smallest-fix search (explaining a searched plan).

    Args:
        model: the model shape.
        plan: the plan (assumed valid).
        c: the constants.

    Returns:
        Both footprints and the ``admission`` verdict; ``advice`` is None.
    """
    actor = footprint(model, plan, c, ACTOR)
    critic = footprint(model, plan, c, CRITIC) if plan.critic else None
    return PlanCheck(plan, actor, critic, admission(model, plan, c), None)


def _check_types(model: object, plan: object, c: object) -> None:
    """Refuse arguments of the wrong type before pricing anything.

    Raises:
        TypeError: naming the argument that is not a ``ModelShape``, ``Plan`` or ``CapacityConstants``.
    """
    kinds = (("model", model, ModelShape), ("plan", plan, Plan), ("c", c, CapacityConstants))
    for name, value, kind in kinds:
        if not isinstance(value, kind):
            raise TypeError(f"check_plan: {name} must be a {kind.__name__}, got {type(value).__name__}")
