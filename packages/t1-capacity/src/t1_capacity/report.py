"""Plain-text reports of a plan check, a plan search and a device split (``t1 plan``, check_plan)."""

from __future__ import annotations

from t1_capacity.check import PlanCheck
from t1_capacity.footprint import TERM_NAMES, CapacityConstants
from t1_capacity.search import SearchResult
from t1_capacity.shapes import ModelShape
from t1_capacity.split import StepSplit


def format_check(
    check: PlanCheck, constants: CapacityConstants, title: str = "", assumptions: bool = False
) -> str:
    """Per-network, per-term table in GiB, the binding term, headroom against M and the verdict."""
    p = check.plan
    a, k = check.actor, check.critic

    def col(f, value) -> str:
        return "-" if f is None else f"{value(f):.2f}"

    lines = []
    if title:
        lines.append(title)
    activations = f"alpha {constants.alpha:g} B"
    if constants.activations is not None:
        activations = "activations per layer kind (calibrated)"
    lines.append(
        f"plan {p.label()}  training devices {p.training_devices}  token wall {p.token_wall}  "
        f"M {p.memory_budget_gib:g} GiB  offload {p.offload}  {activations}  b0 {constants.b0_gib:g} GiB"
    )
    lines.append(f"{'term (GiB per device)':<24}{'actor':>10}{'critic':>10}")
    k_stage = "none" if k is None else f"stage {k.stage}"
    lines.append(f"{'':<24}{f'stage {a.stage}':>10}{k_stage:>10}")
    for name in TERM_NAMES:
        lines.append(f"{name:<24}{a.gib(name):>10.2f}{col(k, lambda f, n=name: f.gib(n)):>10}")
    lines.append(f"{'total':<24}{a.total_gib:>10.2f}{col(k, lambda f: f.total_gib):>10}")
    lines.append(f"{'headroom vs M':<24}{a.headroom_gib:>10.2f}{col(k, lambda f: f.headroom_gib):>10}")
    k_bind = "-" if k is None else k.binding.name
    lines.append(f"{'binding term':<24}{a.binding.name:>22}  /  {k_bind}")
    if check.coresident_gib is not None:
        lines.append(f"co-resident actor + critic: {check.coresident_gib:.2f} GiB")
    lines.append(("ADMIT: " if check.fits else "REFUSE: ") + check.reason())
    if check.advice:
        lines.append("smallest change: " + check.advice)
    if assumptions:
        lines.append("assumptions:")
        lines.extend(f"  - {a}" for a in check.actor.assumptions)
    return "\n".join(lines)


def format_split(split: StepSplit, best: StepSplit, n_star: float) -> str:
    """Generation time, training time, step time and slack at the recipe's split and at the best split."""
    lines = [
        f"step time at n={split.inference_devices} inference / {split.training_devices} training devices: "
        f"generation {split.generation_min:.1f} min, training {split.training_min:.1f} min, "
        f"step {split.step_min:.1f} min ({split.bound}-bound), slack {split.slack_min:.1f} min",
        f"best split n={best.inference_devices}: step {best.step_min:.1f} min "
        f"(generation {best.generation_min:.1f}, training {best.training_min:.1f}); "
        f"balance point n*={n_star:.1f}",
    ]
    return "\n".join(lines)


def format_search(
    result: SearchResult, model: ModelShape, constants: CapacityConstants, top: int = 10, refused: int = 5
) -> str:
    """The ranked admitted plans and why the nearest refused ones were refused."""
    lines = [
        f"{result.n_plans} valid plans over {result.training_devices} training devices: "
        f"{len(result.fitting)} fit, {len(result.refused)} refused"
    ]
    if result.fitting:
        lines.append(f"{'rank':<5}{'plan':<30}{'actor':>8}{'critic':>8}{'headroom':>10}{'mb/rank':>9}")
        for i, cand in enumerate(result.fitting[:top], start=1):
            lines.append(
                f"{i:<5}{cand.plan.label():<30}{cand.actor_gib:>8.1f}{cand.critic_gib:>8.1f}"
                f"{cand.headroom_gib:>10.1f}{cand.plan.microbatches_per_rank:>9g}"
            )
    else:
        lines.append("no plan fits at this device count and token wall")
    priced = result.fitting + result.refused
    if priced and priced[0].admitted.coresident_gib is not None:
        lines.append(
            "offload none: actor and critic co-resident; headroom = M - (actor + critic - one b0), "
            "per stage, as plan check"
        )
    best_dp = result.fitting[0].plan.dp if result.fitting else 0
    shown = [c for c in result.refused if c.plan.dp >= best_dp][:refused] or list(result.refused[:refused])
    if shown:
        lines.append("refused (nearest misses keeping at least as much data parallelism):")
        for cand in shown:
            lines.append(f"  {cand.plan.label():<30}{cand.explain(model, constants)}")
    return "\n".join(lines)
