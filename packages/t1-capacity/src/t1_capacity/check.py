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
    footprint,
    stages,
    total_gib_fast,
)
from t1_capacity.plan import Plan, batch_splits_dp_ok, plan_problems, validate_plan
from t1_capacity.shapes import ModelShape


@dataclass(frozen=True)
class PlanCheck:
    """The verdict on one plan.

    Attributes:
        plan: the plan checked.
        actor: the actor's binding-stage footprint.
        critic: the critic's binding-stage footprint, or None when the run trains no critic (GRPO).
        coresident_gib: with ``offload="none"``, the largest per-stage actor + critic total (one b0), GiB;
            None under forced offload, where each network is checked alone (T1 §4.5).
        fits: whether the plan is admitted.
        advice: when refused, the smallest change found that admits the plan (or why none was found).
    """

    plan: Plan
    actor: Footprint
    critic: Footprint | None
    coresident_gib: float | None
    fits: bool
    advice: str | None

    @property
    def binding(self) -> Footprint:
        """The network with the smaller headroom."""
        nets = [f for f in (self.actor, self.critic) if f is not None]
        return min(nets, key=lambda f: f.headroom_gib)

    def reason(self) -> str:
        """One sentence: which network and term bind, and by how much it misses or clears M."""
        f = self.binding
        if self.coresident_gib is not None:
            over = self.coresident_gib - f.budget_gib
            state = f"exceeds M by {over:.1f} GiB" if over > 0 else f"fits with {-over:.1f} GiB headroom"
            who = "actor + critic co-resident" if self.critic is not None else "actor (no critic)"
            return f"{who} (offload none): {self.coresident_gib:.1f} GiB, {state}"
        if f.fits:
            return (
                f"fits: tightest is the {f.network} on stage {f.stage}, {f.total_gib:.1f} of "
                f"{f.budget_gib:.1f} GiB ({f.headroom_gib:.1f} GiB headroom), largest term "
                f"{f.binding.name} ({f.binding.gib:.1f} GiB)"
            )
        return (
            f"{f.network} exceeds M on stage {f.stage}: {f.total_gib:.1f} > {f.budget_gib:.1f} GiB "
            f"(by {-f.headroom_gib:.1f} GiB); binding term {f.binding.name} = {f.binding.gib:.1f} GiB "
            f"({100 * f.binding.bytes / f.budget_bytes:.0f}% of M)"
        )


def coresident_gib(model: ModelShape, plan: Plan, c: CapacityConstants) -> float:
    """Largest per-stage actor + critic total, allocator residue counted once (offload ``"none"``), GiB."""
    worst = 0.0
    for s in range(plan.pp):
        a = footprint(model, plan, c, ACTOR, s).total_bytes
        if not plan.critic:
            worst = max(worst, a)
            continue
        k = footprint(model, plan, c, CRITIC, s).total_bytes
        worst = max(worst, a + k - c.b0_gib * GIB)
    return worst / GIB


def fits_fast(model: ModelShape, plan: Plan, c: CapacityConstants) -> tuple[bool, float, float]:
    """(fits, actor GiB, critic GiB) for a valid plan, without building footprints (search inner loop).

    The critic's GiB is 0 when the plan trains no critic.
    """
    a = total_gib_fast(model, plan, c, ACTOR)
    k = total_gib_fast(model, plan, c, CRITIC) if plan.critic else 0.0
    if plan.offload == "none":
        return coresident_gib(model, plan, c) <= plan.memory_budget_gib, a, k
    return max(a, k) <= plan.memory_budget_gib, a, k


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
    if fits_fast(model, replace(plan, token_wall=hi * step), c)[0]:
        return hi * step
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits_fast(model, replace(plan, token_wall=mid * step), c)[0]:
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
        ok, a, k = fits_fast(model, new, c)
        if ok:
            admitted.append((new.dp, new.memory_budget_gib - max(a, k), desc, a, k))
    wall = max_token_wall(model, plan, c)
    wall_txt = f"lower token_wall {plan.token_wall} -> {wall}" if wall else "no token wall admits this layout"
    if not admitted:
        return (
            f"no single change of ep/cp/pp/tp at {plan.training_devices} training devices admits it; "
            f"{wall_txt}"
        )
    admitted.sort(key=lambda t: (-t[0], -t[1]))
    dp, head, desc, a, k = admitted[0]
    return f"{desc}: actor {a:.1f} GiB, critic {k:.1f} GiB, headroom {head:.1f} GiB; or {wall_txt}"


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
    validate_plan(model=model, plan=plan)
    stages(model, plan.pp)
    actor = footprint(model, plan, c, ACTOR)
    critic = footprint(model, plan, c, CRITIC) if plan.critic else None
    if plan.offload == "none":
        co = coresident_gib(model, plan, c)
        fits = co <= plan.memory_budget_gib
    else:
        co = None
        fits = actor.fits and (critic is None or critic.fits)
    advice = None if fits else smallest_fix(model, plan, c)
    return PlanCheck(plan, actor, critic, co, fits, advice)
