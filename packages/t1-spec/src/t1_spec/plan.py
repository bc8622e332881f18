"""Parallelism plan and per-device capacity inputs (T1 §4.5, §7.1, §7, Eq. 21, Prop. 7.1).

Names follow Megatron/torchtitan: ``tp`` (tau), ``pp`` (rho), ``cp`` (kappa), ``dp`` (delta), ``ep`` (eta),
``etp`` (expert tensor parallelism). The training partition holds ``tp * pp * cp * dp`` devices.

Co-location: ``inference_devices == 0`` means the engine shares the training devices (time-multiplexed, as the
embedded CPU engine does); then every device trains. With ``inference_devices > 0`` the two partitions are
disjoint and pipelined one step deep, as in the paper (T1 §7).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import Field, model_validator

from t1_spec._base import Spec, Violation, raise_if

DEFAULT_ALPHA = 22.0 * 3072
"""Default activation bytes per token per layer: 22 * h with h = 3072, i.e. Korthikanti et al. (2022)
``sbh(10 + 24/t)`` at t = 2 (selective recompute). The paper measured its own alpha without stating the value
(T1 §7.1); with the recurrent blocks not tensor-sharded, Eq. 21 reproduces both of the paper's findings at an
84k wall (cp = 2 exceeds M with the logit buffer binding, cp = 4 fits) only for alpha between about 53.6k and
82.8k bytes (at b0 = 3 GiB), and 22 * h = 67,584 sits near the middle. ``t1 plan calibrate`` fits it from
measured peaks."""


class PlanSpec(Spec):
    """How the devices are split between inference and training, and how training is parallelised."""

    devices: int = Field(gt=0)
    """G: every accelerator the run holds (devices), inference and training together (T1 §7)."""

    inference_devices: int = Field(ge=0)
    """n: devices serving the behaviour policy (devices), i.e. the SGLang replicas; the paper spends about
    half of G on inference (T1 §7). 0 = co-located: the engine time-shares the training devices (embedded
    runs)."""

    tp: int = Field(default=1, gt=0)
    """tau, tensor-parallel degree (devices). Above 2 it is inert for Qwen3.5 (recurrent blocks are not
    tensor-sharded, T1 §7.1); must divide the KV heads."""

    pp: int = Field(default=1, gt=0)
    """rho, pipeline-parallel degree (devices), one stage each; with ``cp`` the only real memory lever
    (T1 §7.1)."""

    cp: int = Field(default=1, gt=0)
    """kappa, context-parallel degree (devices): each sequence is split over ``cp`` ranks, recurrent scan
    included (T1 §7). At an 84k token wall kappa = 2 exceeds M, kappa = 4 admits (T1 §7.1)."""

    dp: int = Field(default=1, gt=0)
    """delta, data-parallel degree of the training partition (devices). 2 in the paper's production plan
    (T1 §7)."""

    ep: int = Field(default=1, gt=0)
    """eta, expert-parallel degree (devices), carved out of the ``tp * cp * dp`` region; pinned maximal
    because expert optimizer state per device is invariant to it (T1 §7.1, Prop. 7.1). Must divide
    ``num_experts``."""

    etp: int = Field(default=1, gt=0)
    """Expert tensor-parallel degree (devices), Megatron's ``expert_tensor_parallel_size``; ``etp * ep`` must
    divide ``tp * cp * dp``. 1 unless experts are also tensor-sharded."""

    token_wall: int = Field(gt=0)
    """T: the longest sequence one micro-batch holds (tokens), the wall every trajectory chunk must fit under.
    The paper's production wall is 84k = 86,016 tokens (T1 §7.1, §7)."""

    memory_budget_gib: float = Field(default=95.0, gt=0)
    """M: per-device memory budget (GiB) that actor and critic must each fit alone (T1 §4.5, §7.1)."""

    offload: Literal["forced", "none"] = "forced"
    """``forced``: actor and critic time-multiplex the training devices, each offloaded while the other runs
    (T1 §4.5); ``none``: both stay resident (small models only)."""

    alpha: float = Field(default=DEFAULT_ALPHA, gt=0)
    """alpha: activation bytes per token per layer in Eq. 21 (bytes); the paper measured it without stating
    the value. Default 22 * 3072 = 67,584 B (Korthikanti et al. 2022, selective recompute at t = 2), chosen so
    that Eq. 21 reproduces the paper's binding logit buffer at kappa = 2."""

    b0_gib: float = Field(default=3.0, ge=0)
    """b0: constant allocator residue per device (GiB), "a few percent of M" (T1 §7.1); default 3 GiB, chosen.
    """

    @property
    def training_devices(self) -> int:
        """``devices - inference_devices``: the devices the trainer's ``tp * pp * cp * dp`` grid occupies."""
        return self.devices - self.inference_devices

    @property
    def expert_region(self) -> int:
        """``tp * cp * dp``: the ranks of one pipeline stage, out of which ``etp * ep`` is carved."""
        return self.tp * self.cp * self.dp

    @property
    def expert_dp(self) -> int:
        """Expert data-parallel degree ``tp * cp * dp / (etp * ep)`` (the expert optimizer shard group)."""
        return self.expert_region // (self.etp * self.ep)

    @model_validator(mode="after")
    def _check(self) -> PlanSpec:
        raise_if(plan_violations(self))
        return self


def plan_violations(p: PlanSpec) -> list[Violation]:
    """Rules of ``PlanSpec`` alone (field paths relative to the plan section)."""
    v: list[Violation] = []
    if p.inference_devices >= p.devices:
        v.append(
            Violation(
                "plan.inference_lt_devices",
                "inference_devices",
                f"inference_devices {p.inference_devices} leaves no training device out of "
                f"devices {p.devices}: lower inference_devices (0 = co-located) or raise devices",
            )
        )
        return v
    grid = p.tp * p.pp * p.cp * p.dp
    if grid != p.training_devices:
        v.append(
            Violation(
                "plan.device_product",
                "dp",
                f"tp*pp*cp*dp = {p.tp}*{p.pp}*{p.cp}*{p.dp} = {grid} but the training partition has "
                f"devices - inference_devices = {p.devices} - {p.inference_devices} = "
                f"{p.training_devices}: change dp (or tp/pp/cp/devices) so the product matches",
            )
        )
    v += grid_violations(p.tp, p.cp, p.dp, p.ep, p.etp, p.token_wall)
    if p.b0_gib >= p.memory_budget_gib:
        v.append(
            Violation(
                "plan.b0_lt_budget",
                "b0_gib",
                f"b0_gib {p.b0_gib} is not below memory_budget_gib {p.memory_budget_gib}: the residue "
                "is a few percent of M",
            )
        )
    return v


# --- layout rules on plain integers, shared with t1_capacity's plan search (one copy of each rule) ---

HEAD_FIELDS = ("num_key_value_heads", "num_attention_heads", "linear_num_key_heads", "linear_num_value_heads")
"""Model fields whose head counts tensor parallelism shards (full-attention KV and query heads, Gated DeltaNet
key and value heads); ``tp`` must divide each."""


def expert_region_ok(tp: int, cp: int, dp: int, ep: int, etp: int) -> bool:
    """``etp * ep`` divides the expert region ``tp * cp * dp`` (rule ``plan.expert_region``)."""
    return (tp * cp * dp) % (etp * ep) == 0


def token_wall_cp_ok(token_wall: int, cp: int) -> bool:
    """``token_wall`` is a multiple of ``2 * cp`` (rule ``plan.token_wall_cp``; load-balanced CP chunks)."""
    return token_wall % (2 * cp) == 0


def token_wall_tp_ok(token_wall: int, tp: int) -> bool:
    """``token_wall`` is a multiple of ``tp`` (rule ``plan.token_wall_tp``; sequence parallelism)."""
    return token_wall % tp == 0


def ep_divides_experts_ok(ep: int, num_experts: int) -> bool:
    """``ep`` divides ``num_experts`` (rule ``plan.ep_divides_experts``)."""
    return num_experts % ep == 0


def pp_divides_layers_ok(pp: int, num_layers: int) -> bool:
    """``pp`` divides ``num_layers`` (rule ``plan.pp_divides_layers``; equal pipeline stages)."""
    return num_layers % pp == 0


def tp_undivided_heads(tp: int, heads: Mapping[str, int]) -> str | None:
    """The first of ``HEAD_FIELDS`` whose count ``tp`` does not divide, or ``None``.

    Rule ``plan.tp_divides_heads``.

    Args:
        tp: tensor-parallel degree.
        heads: head count per field name of ``HEAD_FIELDS`` (a missing field is not checked).
    """
    for name in HEAD_FIELDS:
        if name in heads and heads[name] % tp:
            return name
    return None


def grid_violations(
    tp: int, cp: int, dp: int, ep: int, etp: int, token_wall: int, prefix: str = ""
) -> list[Violation]:
    """The plan's own layout rules: expert region, token wall against ``2*cp`` and ``tp``.

    Args:
        tp: tensor-parallel degree (devices).
        cp: context-parallel degree (devices).
        dp: data-parallel degree (devices).
        ep: expert-parallel degree (devices).
        etp: expert tensor-parallel degree (devices).
        token_wall: tokens per micro-batch.
        prefix: prepended to each field path (``""`` inside ``PlanSpec``, ``"plan."`` from the recipe root).

    Returns:
        one ``Violation`` per broken rule (``plan.expert_region``, ``plan.token_wall_cp``,
        ``plan.token_wall_tp``).
    """
    v: list[Violation] = []
    region = tp * cp * dp
    if not expert_region_ok(tp, cp, dp, ep, etp):
        v.append(
            Violation(
                "plan.expert_region",
                prefix + "ep",
                f"etp*ep = {etp}*{ep} = {etp * ep} does not divide the expert region "
                f"tp*cp*dp = {region} (Megatron/torchtitan carve EP out of it): pick ep so "
                f"that etp*ep divides tp*cp*dp (maximal: ep = {region // etp})",
            )
        )
    if not token_wall_cp_ok(token_wall, cp):
        v.append(
            Violation(
                "plan.token_wall_cp",
                prefix + "token_wall",
                f"token_wall {token_wall} is not divisible by 2*cp = {2 * cp} (load-balanced "
                "context parallelism splits each sequence into 2*cp chunks): round token_wall to a "
                f"multiple of {2 * cp}",
            )
        )
    if not token_wall_tp_ok(token_wall, tp):
        v.append(
            Violation(
                "plan.token_wall_tp",
                prefix + "token_wall",
                f"token_wall {token_wall} is not divisible by tp {tp} (sequence parallelism "
                "splits tokens over tp): round token_wall to a multiple of tp",
            )
        )
    return v


def model_layout_violations(
    tp: int,
    pp: int,
    ep: int,
    num_layers: int,
    num_experts: int,
    heads: Mapping[str, int],
    prefix: str = "plan.",
) -> list[Violation]:
    """Rules tying the parallel degrees to the architecture: ep | experts, tp | every head count, pp | layers.

    Args:
        tp: tensor-parallel degree (devices).
        pp: pipeline-parallel degree (devices).
        ep: expert-parallel degree (devices).
        num_layers: decoder layers L.
        num_experts: routed experts E.
        heads: head count per field of ``HEAD_FIELDS``.
        prefix: prepended to each field path (``"plan."`` from the recipe root).

    Returns:
        one ``Violation`` per broken rule (``plan.ep_divides_experts``, ``plan.tp_divides_heads``,
        ``plan.pp_divides_layers``).
    """
    v: list[Violation] = []
    if not ep_divides_experts_ok(ep, num_experts):
        v.append(
            Violation(
                "plan.ep_divides_experts",
                prefix + "ep",
                f"ep {ep} does not divide model.num_experts {num_experts}: every EP rank must hold "
                "the same number of experts; pick ep from the divisors of num_experts",
            )
        )
    bad = tp_undivided_heads(tp, heads)
    if bad is not None:
        v.append(
            Violation(
                "plan.tp_divides_heads",
                prefix + "tp",
                f"tp {tp} does not divide model.{bad} {heads[bad]}: tensor parallelism "
                "shards heads; pick tp from its divisors (the paper's 2 KV heads allow tp <= 2)",
            )
        )
    if not pp_divides_layers_ok(pp, num_layers):
        v.append(
            Violation(
                "plan.pp_divides_layers",
                prefix + "pp",
                f"pp {pp} does not divide model.num_layers {num_layers}: stages must hold equal "
                "layer counts; pick pp from its divisors",
            )
        )
    return v
