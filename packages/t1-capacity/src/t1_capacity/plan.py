"""A training parallelism plan and its structural validity (T1 §7.1; as torchtitan ``ParallelDims``)."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from t1_capacity.shapes import ModelShape
from t1_spec.plan import HEAD_FIELDS, grid_violations, model_layout_violations


class PlanError(ValueError):
    """A plan that cannot be laid out on the devices at all (not merely one that does not fit in memory)."""


@dataclass(frozen=True)
class Plan:
    """One network's training layout on the training partition, plus the run-level quantities the model needs.

    Notation: tp = tau, pp = rho, cp = kappa, dp = delta, ep = eta (T1 §7.1); tp * pp * cp * dp = G_train, the
    devices left to training after ``inference_devices`` serve rollouts.

    Attributes:
        tp: tensor-parallel degree.
        pp: pipeline stages.
        cp: context-parallel degree (the sequence is split over cp ranks).
        dp: data-parallel degree.
        ep: expert-parallel degree (routed experts split over ep ranks).
        etp: expert tensor-parallel degree (each expert's FFN split over etp ranks).
        token_wall: the longest sample the trainer must hold, in tokens (one packed micro-batch).
        memory_budget_gib: M, the usable memory of one device, GiB (95 in T1 §4.5).
        offload: ``"forced"``: actor and critic time-share the devices, each must fit M alone (T1 §4.5);
            ``"none"``: both stay resident, their sum must fit M.
        inference_devices: n, devices serving inference (not part of this plan's layout).
        batch_size: tasks per optimizer step (``ppo.batch_size``; T1 §5: 512).
        samples_per_task: trajectories per task per step (``ppo.samples_per_task``; 1 in T1 §5, the group
            size under GRPO). The step's batch is ``batch_size * samples_per_task`` samples, split evenly over
            the dp ranks (rule ``ppo.batch_splits_dp``).
        critic: whether a critic network is trained too (PPO with GAE, T1 §4.5); False for GRPO, which has
            no critic, so only the actor is checked.

    Raises:
        PlanError: ``memory_budget_gib`` not a finite number > 0 (a NaN budget would silently refuse every
            plan), ``batch_size`` / ``samples_per_task`` not an integer >= 1, or ``inference_devices`` < 0.
            The ranges of the parallel degrees and the token wall are checked by ``plan_problems`` /
            ``validate_plan``, which list every broken rule at once.
        TypeError: a parallel degree, ``token_wall`` or ``inference_devices`` that is not an integer (a bool
            or a float such as 2.0 is refused: ``tp=True`` is not read as tp 1).
    """

    tp: int = 1
    pp: int = 1
    cp: int = 1
    dp: int = 1
    ep: int = 1
    etp: int = 1
    token_wall: int = 86_016
    memory_budget_gib: float = 95.0
    offload: str = "forced"
    inference_devices: int = 0
    batch_size: int = 512
    critic: bool = True
    samples_per_task: int = 1

    def __post_init__(self) -> None:
        # A NaN budget compares false against every total, so it would read as "does not fit" everywhere.
        m = self.memory_budget_gib
        if not isinstance(m, numbers.Real) or isinstance(m, bool) or not math.isfinite(m) or m <= 0:
            raise PlanError(f"plan.memory_budget_gib must be a finite number of GiB > 0, got {m!r}")
        for name in ("tp", "pp", "cp", "dp", "ep", "etp", "token_wall", "inference_devices"):
            value = getattr(self, name)
            if not isinstance(value, numbers.Integral) or isinstance(value, bool):
                raise TypeError(f"plan.{name} must be an integer, got {value!r} ({type(value).__name__})")
        if self.inference_devices < 0:
            raise PlanError(
                f"plan.inference_devices must be >= 0 (0 = co-located), got {self.inference_devices}"
            )
        for name in ("batch_size", "samples_per_task"):
            value = getattr(self, name)
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
                raise PlanError(f"plan.{name} must be an integer >= 1, got {value!r}")

    @property
    def training_devices(self) -> int:
        """G_train = tp * pp * cp * dp."""
        return self.tp * self.pp * self.cp * self.dp

    @property
    def expert_data_parallel(self) -> int:
        """EDP, the expert optimizer's shard count: tp * cp * dp / (ep * etp) (MoE parallel folding)."""
        return (self.tp * self.cp * self.dp) // (self.ep * self.etp)

    @property
    def batch_samples(self) -> int:
        """Samples per optimizer step, ``batch_size * samples_per_task`` (T1 §5: 512 * 1)."""
        return self.batch_size * self.samples_per_task

    @property
    def microbatches_per_rank(self) -> float:
        """Serially accumulated micro-batches per dp rank, samples / dp (T1 §7.1: 512 / 2 = 256)."""
        return self.batch_samples / self.dp

    def label(self) -> str:
        """Short human form, e.g. ``tp2 pp8 cp4 dp2 ep16``."""
        etp = f" etp{self.etp}" if self.etp != 1 else ""
        return f"tp{self.tp} pp{self.pp} cp{self.cp} dp{self.dp} ep{self.ep}{etp}"


def head_counts(model: ModelShape) -> dict[str, int]:
    """The head counts tensor parallelism shards, keyed by ``t1_spec.plan.HEAD_FIELDS``."""
    return {name: getattr(model, name) for name in HEAD_FIELDS}


def plan_problems(plan: Plan, model: ModelShape) -> list[str]:
    """List why ``plan`` cannot be laid out for ``model``; empty when it can.

    The layout rules are ``t1_spec``'s own (``grid_violations``, ``model_layout_violations``), so a plan this
    accepts is one ``t1 recipe validate`` accepts too: pp divides the layer count; ep divides the expert
    count; etp * ep divides tp * cp * dp; tp divides the attention, KV and Gated DeltaNet head counts; the
    token wall is a multiple of 2*cp and of tp. The capacity model adds: every degree >= 1; ep = 1 for a
    dense model; etp divides the expert FFN width; tp divides the shared-expert width; a known offload mode
    (a positive, finite budget is enforced when the ``Plan`` is built).

    Args:
        plan: the plan to check.
        model: the model it lays out.

    Returns:
        One sentence per violated rule, naming the field and how to fix it.
    """
    out: list[str] = []
    for name in ("tp", "pp", "cp", "dp", "ep", "etp"):
        if getattr(plan, name) < 1:
            out.append(f"plan.{name}={getattr(plan, name)} must be >= 1")
    if plan.token_wall < 1:
        out.append(f"plan.token_wall={plan.token_wall} must be >= 1 token")
    if out:
        return out
    rules = model_layout_violations(
        plan.tp, plan.pp, plan.ep, model.num_layers, model.num_experts, head_counts(model)
    ) + grid_violations(plan.tp, plan.cp, plan.dp, plan.ep, plan.etp, plan.token_wall, prefix="plan.")
    out += [f"{v.field}={getattr(plan, v.field.removeprefix('plan.'))}: {v.message}" for v in rules]
    if model.num_experts == 0 and plan.ep != 1:
        out.append(f"plan.ep={plan.ep} must be 1 for a dense model (num_experts=0)")
    if model.moe_intermediate_size % plan.etp:
        out.append(f"plan.etp={plan.etp} must divide moe_intermediate_size={model.moe_intermediate_size}")
    if model.shared_expert_intermediate_size % plan.tp:
        out.append(f"plan.tp={plan.tp} must divide shared_expert_intermediate_size")
    if plan.offload not in ("forced", "none"):
        out.append(f"plan.offload={plan.offload!r} must be 'forced' or 'none'")
    return out


def batch_splits_dp_ok(plan: Plan) -> bool:
    """The step's ``batch_size * samples_per_task`` samples split evenly over dp (``ppo.batch_splits_dp``).

    T1 §7: the batch is split evenly over the data-parallel ranks. Kept apart from ``plan_problems`` because
    a measured peak (``t1 plan calibrate``) does not depend on the batch; plan search applies it.
    """
    return plan.dp >= 1 and plan.batch_samples % plan.dp == 0


def validate_plan(plan: Plan, model: ModelShape) -> None:
    """Raise when ``plan`` cannot be laid out.

    Raises:
        PlanError: listing every violated rule (see ``plan_problems``).
    """
    problems = plan_problems(plan, model)
    if problems:
        raise PlanError("invalid plan " + plan.label() + ": " + "; ".join(problems))
