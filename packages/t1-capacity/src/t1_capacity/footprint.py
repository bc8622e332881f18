"""The closed-form per-device footprint of one network, term by term (T1 §7.1, Eq. 21 and Prop. 7.1).

Eq. 21 prices one device of one network (actor or critic) as

    expert weights + grads      (2 + 4) B * P_e,stage / (ep * etp)
    expert optimizer state      12 B * P_e,stage / (ep * etp) / EDP  = 12 B * P_e / G_train   (Prop. 7.1)
    dense weights + grads       (2 + 4) B * P_d,local
    dense optimizer state       12 B * P_d,local / (dp * cp)
    activations                 alpha * T * L_stage / cp   (recurrent layers: no tp division;
                                                            attention layers: / min(tp, kv heads))
    logit buffer (actor only)   T * |V| * b_logit / (tp * cp), on the terminal pipeline stage
    allocator residue           b0

with bf16 weights (2 B), fp32 main gradients (4 B) and fp32 master weights plus two fp32 Adam moments (12 B)
sharded by the distributed optimizer (Megatron-LM ``6 + 12/d`` bytes per parameter). Every term below is a
named function returning bytes; ``Footprint`` collects them with the total, the binding term, the headroom
against M and the assumptions made (the Megatron-Bridge ``TrainingMemoryEstimate`` pattern).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from functools import lru_cache

from t1_capacity.activations import ActivationModel
from t1_capacity.plan import Plan
from t1_capacity.shapes import FULL_ATTENTION, ModelShape

GIB = float(1 << 30)

ACTOR = "actor"
CRITIC = "critic"

# Term names, in report order.
EXPERT_WEIGHTS = "expert_weights"
EXPERT_GRADS = "expert_grads"
EXPERT_OPTIMIZER = "expert_optimizer"
DENSE_WEIGHTS = "dense_weights"
DENSE_GRADS = "dense_grads"
DENSE_OPTIMIZER = "dense_optimizer"
RECURRENT_ACTIVATIONS = "recurrent_activations"
ATTENTION_ACTIVATIONS = "attention_activations"
EDGE_ACTIVATIONS = "edge_activations"
LOGIT_BUFFER = "logit_buffer"
ALLOCATOR_RESIDUE = "allocator_residue"
TERM_NAMES = (
    EXPERT_WEIGHTS,
    EXPERT_GRADS,
    EXPERT_OPTIMIZER,
    DENSE_WEIGHTS,
    DENSE_GRADS,
    DENSE_OPTIMIZER,
    RECURRENT_ACTIVATIONS,
    ATTENTION_ACTIVATIONS,
    EDGE_ACTIVATIONS,
    LOGIT_BUFFER,
    ALLOCATOR_RESIDUE,
)


@dataclass(frozen=True)
class CapacityConstants:
    """The constants of Eq. 21 that the paper measured but did not print, with documented defaults.

    Attributes:
        alpha: activation bytes per token per layer held on a device at the peak (before the cp division, and
            before the min(tp, g) division of attention layers). Default 67,584 B = 22 h for h = 3072: the
            Korthikanti et al. (2022, Table 2) selective-recompute coefficient sbh(10 + 24/t) at t = 2. The
            paper measured alpha without printing it (T1 §7.1); for its production plan (tp 2, pp 4, dp 2, 84k
            wall) Eq. 21 reproduces both findings (cp 2 exceeds M with the logit buffer binding, cp 4 fits)
            for alpha in about [53.6k, 82.8k] B at b0 = 3 GiB, and 22 h sits near the middle. Calibrate it
            with ``t1 plan calibrate`` (``t1_capacity.calibrate``).
        b0_gib: allocator residue, GiB: fragmentation, NCCL and kernel workspaces. T1 §7.1 says "a few percent
            of M"; default 3 GiB (3.2% of 95 GiB).
        weight_bytes: bytes per resident weight (bf16: 2).
        grad_bytes: bytes per main gradient (fp32: 4, not sharded by the distributed optimizer).
        optimizer_bytes: bytes per parameter of the sharded optimizer state (fp32 master 4 + Adam m 4 + v 4).
        logit_bytes: bytes per logit at the cross-entropy peak. Default 6: the bf16 output of the LM head
            (2 B) is still alive when the vocab-parallel cross entropy makes its fp32 copy (4 B), see
            ``reference/capacity.md`` §10; Megatron's estimator counts the 4 B only.
        vocab_pad_multiple: the vocabulary is padded to a multiple of this times tp (Megatron default 128).
        logit_rows: token positions whose logits are alive at once. None (Eq. 21, the paper's Megatron
            stack): every token of the wall; an integer: a chunked LM head (`t1_capacity.layouts`), at most
            this many rows, never more than the wall.
        activations: None (Eq. 21): activations are ``alpha`` per token per layer; an `ActivationModel`: per
            layer kind with a backend's measured coefficients (`t1_capacity.activations`), alpha unused.

    Raises:
        ValueError: naming the field, when alpha or b0_gib is negative or not finite (0 is allowed: the
            calibration splits the footprint at alpha = b0 = 0), a byte count is not a finite number > 0,
            vocab_pad_multiple is not an integer >= 1, or logit_rows is neither None nor an integer >= 1.
    """

    alpha: float = 67_584.0
    b0_gib: float = 3.0
    weight_bytes: float = 2.0
    grad_bytes: float = 4.0
    optimizer_bytes: float = 12.0
    logit_bytes: float = 6.0
    vocab_pad_multiple: int = 128
    logit_rows: int | None = None
    activations: ActivationModel | None = None

    def __post_init__(self) -> None:
        for name in ("alpha", "b0_gib"):
            value = getattr(self, name)
            if not _finite_real(value) or value < 0:
                raise ValueError(f"CapacityConstants.{name} must be a finite number >= 0, got {value!r}")
        for name in ("weight_bytes", "grad_bytes", "optimizer_bytes", "logit_bytes"):
            value = getattr(self, name)
            if not _finite_real(value) or value <= 0:
                raise ValueError(
                    f"CapacityConstants.{name} must be a finite number of bytes > 0, got {value!r}"
                )
        pad = self.vocab_pad_multiple
        if not isinstance(pad, numbers.Integral) or isinstance(pad, bool) or pad < 1:
            raise ValueError(f"CapacityConstants.vocab_pad_multiple must be an integer >= 1, got {pad!r}")
        rows = self.logit_rows
        if rows is not None and (
            not isinstance(rows, numbers.Integral) or isinstance(rows, bool) or rows < 1
        ):
            raise ValueError(f"CapacityConstants.logit_rows must be None or an integer >= 1, got {rows!r}")
        if self.activations is not None and not isinstance(self.activations, ActivationModel):
            raise ValueError(
                f"CapacityConstants.activations must be an ActivationModel, got {self.activations!r}"
            )


def _finite_real(value: object) -> bool:
    """A finite real number (not a bool)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


PAPER_CONSTANTS = CapacityConstants()


@dataclass(frozen=True)
class Stage:
    """One pipeline stage's share of the model.

    Attributes:
        index: stage number, 0-based.
        n_attention: full-attention layers on the stage.
        n_recurrent: recurrent (GatedDeltaNet) layers on the stage.
        first: holds the embedding.
        last: holds the final norm and the head (LM head for the actor, value head for the critic).
    """

    index: int
    n_attention: int
    n_recurrent: int
    first: bool
    last: bool

    @property
    def n_layers(self) -> int:
        """Layers on the stage, L / pp."""
        return self.n_attention + self.n_recurrent


@lru_cache(maxsize=256)
def stages(model: ModelShape, pp: int) -> tuple[Stage, ...]:
    """Split the layers into ``pp`` even, contiguous stages, ``[pp]``.

    Raises:
        ValueError: when pp does not divide the layer count.
    """
    if pp < 1 or model.num_layers % pp:
        raise ValueError(f"pp={pp} must divide num_layers={model.num_layers}")
    per = model.num_layers // pp
    types = model.layer_types
    out = []
    for s in range(pp):
        chunk = types[s * per : (s + 1) * per]
        n_attn = sum(t == FULL_ATTENTION for t in chunk)
        out.append(Stage(s, n_attn, per - n_attn, s == 0, s == pp - 1))
    return tuple(out)


def padded_vocab(vocab_size: int, tp: int, multiple: int = 128) -> int:
    """Vocabulary padded to a multiple of ``multiple * tp`` (Megatron): 248,320 for tp <= 4."""
    m = multiple * tp
    return -(-vocab_size // m) * m


def attention_tp_divisor(tp: int, num_key_value_heads: int) -> int:
    """How far the full-attention layer's key/value side and activations divide under tp: min(tp, g).

    With g key/value heads, tp > g replicates the key/value heads instead of splitting them; together with the
    recurrent blocks not being tensor-sharded this is why "tensor parallelism beyond tau = 2 is likewise
    inert" for the paper's model (g = 2, T1 §7.1).
    """
    return max(1, min(tp, num_key_value_heads))


def expert_params_on_device(model: ModelShape, plan: Plan, stage: Stage) -> float:
    """Routed-expert parameters resident on one device of ``stage``: P_e * (L_stage / L) / (ep * etp)."""
    return model.expert_params_per_layer * stage.n_layers / (plan.ep * plan.etp)


def dense_params_on_device(model: ModelShape, plan: Plan, stage: Stage, network: str = ACTOR) -> float:
    """Dense parameters resident on one device of ``stage`` (T1 §7.1 sharding of the dense bucket).

    Shared experts, attention query/output projections, embedding and LM head divide by tp; attention
    key/value projections by min(tp, g); the recurrent mixer, router, gates and norms are replicated across
    tp. The embedding sits on the first stage; the last stage holds the final norm and the head: an untied LM
    head (|V| h / tp) for the actor, a scalar value head (h) for the critic (T1 §4.5). A tied embedding on a
    multi-stage plan is still materialised on the last stage (Megatron keeps a copy).
    """
    tp = plan.tp
    v = padded_vocab(model.vocab_size, tp)
    n = stage.n_layers * (model.shared_expert_params_per_layer / tp + model.replicated_params_per_layer)
    n += stage.n_attention * (
        model.attention_qo_params / tp
        + model.attention_kv_params / attention_tp_divisor(tp, model.num_key_value_heads)
        + model.attention_replicated_params
    )
    n += stage.n_recurrent * model.recurrent_params
    if stage.first:
        n += v * model.hidden_size / tp
    if stage.last:
        n += model.hidden_size  # final norm
        if network == ACTOR:
            if not (model.tie_word_embeddings and stage.first):
                n += v * model.hidden_size / tp
        else:
            n += model.hidden_size  # value head h -> 1
    return n


# ---- the terms of Eq. 21, each in bytes --------------------------------------------------------------------


def expert_weight_bytes(model: ModelShape, plan: Plan, stage: Stage, c: CapacityConstants) -> float:
    """Resident routed-expert weights, bf16: 2 B * P_e,stage / (ep * etp) (T1 §7.1, Eq. 21)."""
    return c.weight_bytes * expert_params_on_device(model, plan, stage)


def expert_grad_bytes(model: ModelShape, plan: Plan, stage: Stage, c: CapacityConstants) -> float:
    """Routed-expert fp32 main gradients: 4 B * P_e,stage / (ep * etp) (T1 §7.1, Eq. 21)."""
    return c.grad_bytes * expert_params_on_device(model, plan, stage)


def expert_optimizer_bytes(model: ModelShape, plan: Plan, stage: Stage, c: CapacityConstants) -> float:
    """Routed-expert optimizer state, 12 B per parameter sharded over EDP = tp cp dp / (ep etp) (Prop. 7.1).

    Resident experts shrink as 1/ep while the shard count grows as tp cp dp / ep; the product is G_train, so
    the term equals 12 B * P_e / G_train for every plan with the same training device count.
    """
    return c.optimizer_bytes * expert_params_on_device(model, plan, stage) / plan.expert_data_parallel


def dense_weight_bytes(
    model: ModelShape, plan: Plan, stage: Stage, c: CapacityConstants, network: str
) -> float:
    """Resident dense weights, bf16: 2 B * P_d,local (T1 §7.1, Eq. 21)."""
    return c.weight_bytes * dense_params_on_device(model, plan, stage, network)


def dense_grad_bytes(
    model: ModelShape, plan: Plan, stage: Stage, c: CapacityConstants, network: str
) -> float:
    """Dense fp32 main gradients: 4 B * P_d,local (T1 §7.1, Eq. 21)."""
    return c.grad_bytes * dense_params_on_device(model, plan, stage, network)


def dense_optimizer_bytes(
    model: ModelShape, plan: Plan, stage: Stage, c: CapacityConstants, network: str
) -> float:
    """Dense optimizer state: 12 B * P_d,local / (dp * cp), the distributed optimizer's shard (Eq. 21).

    The shard group is the data x context group, as in Megatron-Core's ``intra_dp_cp_group``
    (``reference/capacity.md`` §1).
    """
    return c.optimizer_bytes * dense_params_on_device(model, plan, stage, network) / (plan.dp * plan.cp)


def recurrent_activation_bytes(
    plan: Plan, stage: Stage, c: CapacityConstants, model: ModelShape | None = None
) -> float:
    """Activation peak of the stage's recurrent (GatedDeltaNet) layers: alpha * T * L_rec / cp (Eq. 21).

    No tp division: the sequence is re-gathered to full length before a recurrent block, which is not
    tensor-sharded (T1 §7.1). The cp division is the native sequence-sharded scan (T1 §7.1: peaks 1/2, 1/4,
    1/8 at cp 2, 4, 8). With ``c.activations`` set, alpha is replaced by the per-kind bytes per token of a
    Gated DeltaNet layer (`ActivationModel.layer_bytes_per_token`; ``model`` is then required).
    """
    return _per_token(c, model, "gdn", plan.token_wall) * plan.token_wall * stage.n_recurrent / plan.cp


def _per_token(c: CapacityConstants, model: ModelShape | None, mixer: str, tokens: int) -> float:
    """Bytes per token of one layer with ``mixer`` on ``tokens``: alpha, or the activation model's."""
    if c.activations is None:
        return c.alpha
    return c.activations.layer_bytes_per_token(model, mixer, tokens)  # type: ignore[arg-type]


def edge_activation_bytes(model: ModelShape, plan: Plan, stage: Stage, c: CapacityConstants) -> float:
    """Embedding (first stage) and head and loss (last stage) activations; 0 under Eq. 21 (alpha: layers)."""
    if c.activations is None:
        return 0.0
    return c.activations.edge_bytes_per_token(model, stage.first, stage.last) * plan.token_wall / plan.cp


def attention_activation_bytes(model: ModelShape, plan: Plan, stage: Stage, c: CapacityConstants) -> float:
    """Activation peak of the stage's full-attention layers: alpha T L_attn / (cp min(tp, g)) (Eq. 21)."""
    div = plan.cp * attention_tp_divisor(plan.tp, model.num_key_value_heads)
    return _per_token(c, model, "attention", plan.token_wall) * plan.token_wall * stage.n_attention / div


def logit_buffer_bytes(
    model: ModelShape, plan: Plan, stage: Stage, c: CapacityConstants, network: str
) -> float:
    """Logits of the output projection on the terminal stage: T * |V_pad| * b_logit / (tp * cp) (T1 §7.1).

    Zero on other stages, and zero for the critic, whose scalar value head replaces the LM head (T1 §4.5):
    its T x 1 output is negligible and is left out. With ``c.logit_rows`` set (a chunked LM head), T is
    ``min(token_wall, logit_rows)``: one chunk's logits, not the wall's.
    """
    if not stage.last or network != ACTOR:
        return 0.0
    v = padded_vocab(model.vocab_size, plan.tp, c.vocab_pad_multiple)
    rows = plan.token_wall if c.logit_rows is None else min(plan.token_wall, c.logit_rows)
    return rows * v * c.logit_bytes / (plan.tp * plan.cp)


def allocator_residue_bytes(c: CapacityConstants) -> float:
    """Allocator residue b0: fragmentation, communication, kernels ("a few percent of M", T1 §7.1)."""
    return c.b0_gib * GIB


# ---- the result --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Term:
    """One term of Eq. 21 on one device.

    Attributes:
        name: one of ``TERM_NAMES``.
        bytes: its size in bytes.
    """

    name: str
    bytes: float

    @property
    def gib(self) -> float:
        """Size in GiB."""
        return self.bytes / GIB


ASSUMPTIONS: tuple[str, ...] = (
    "bf16 weights (2 B), fp32 main gradients (4 B), fp32 master + Adam m, v (12 B) sharded by the "
    "distributed optimizer (Megatron-LM 6 + 12/d bytes per parameter)",
    "expert optimizer shard group EDP = tp*cp*dp/(ep*etp); dense optimizer shard group dp*cp",
    "recurrent (GatedDeltaNet) mixers are not tensor-sharded, parameters or activations (T1 §7.1)",
    "full-attention key/value projections and attention-layer activations divide by min(tp, kv heads)",
    "activations = alpha * token_wall * layers / cp per stage (a backend's activation model: per layer kind, "
    "t1_capacity.activations); alpha absorbs recompute policy and pipeline "
    "in-flight micro-batches (calibrate it)",
    "logit buffer only on the actor's terminal stage, 6 B per logit by default (bf16 logits + fp32 copy) "
    "over the whole wall, vocabulary padded to 128*tp; a chunked LM head (the torch backend) holds one "
    "chunk; the critic's scalar value head has no logit buffer",
    "pipeline stages even (L / pp layers each); the binding stage is reported",
    "not modelled: routing imbalance, CUDA graphs, offload staging buffers (inside b0)",
)


@dataclass(frozen=True)
class Footprint:
    """Per-device memory of one network on one pipeline stage, term by term (Eq. 21).

    Attributes:
        network: ``"actor"`` or ``"critic"``.
        stage: the pipeline stage priced (the binding one when chosen by ``footprint``).
        terms: every term, in ``TERM_NAMES`` order.
        budget_bytes: M in bytes.
        assumptions: what the numbers assume.
    """

    network: str
    stage: int
    terms: tuple[Term, ...]
    budget_bytes: float
    assumptions: tuple[str, ...] = field(default=ASSUMPTIONS, repr=False)

    @property
    def total_bytes(self) -> float:
        """Sum of all terms, bytes."""
        return sum(t.bytes for t in self.terms)

    @property
    def total_gib(self) -> float:
        """Sum of all terms, GiB."""
        return self.total_bytes / GIB

    @property
    def budget_gib(self) -> float:
        """M, GiB."""
        return self.budget_bytes / GIB

    @property
    def headroom_gib(self) -> float:
        """M minus the total, GiB (negative when the network does not fit)."""
        return (self.budget_bytes - self.total_bytes) / GIB

    @property
    def fits(self) -> bool:
        """Whether the total is within M."""
        return self.total_bytes <= self.budget_bytes

    @property
    def binding(self) -> Term:
        """The largest term."""
        return max(self.terms, key=lambda t: t.bytes)

    def term(self, name: str) -> Term:
        """The term called ``name``.

        Raises:
            KeyError: for an unknown name.
        """
        for t in self.terms:
            if t.name == name:
                return t
        raise KeyError(f"no term {name!r}; terms are {', '.join(TERM_NAMES)}")

    def gib(self, name: str) -> float:
        """The term called ``name`` in GiB."""
        return self.term(name).gib


def stage_footprint(
    model: ModelShape, plan: Plan, stage: Stage, c: CapacityConstants = PAPER_CONSTANTS, network: str = ACTOR
) -> Footprint:
    """Price one device of ``stage`` for ``network`` (Eq. 21).

    Args:
        model: the model shape.
        plan: the plan (assumed valid; see ``t1_capacity.plan.validate_plan``).
        stage: which pipeline stage.
        c: the constants.
        network: ``"actor"`` (LM head, logit buffer) or ``"critic"`` (scalar value head).

    Returns:
        The footprint with every term in bytes.
    """
    terms = (
        Term(EXPERT_WEIGHTS, expert_weight_bytes(model, plan, stage, c)),
        Term(EXPERT_GRADS, expert_grad_bytes(model, plan, stage, c)),
        Term(EXPERT_OPTIMIZER, expert_optimizer_bytes(model, plan, stage, c)),
        Term(DENSE_WEIGHTS, dense_weight_bytes(model, plan, stage, c, network)),
        Term(DENSE_GRADS, dense_grad_bytes(model, plan, stage, c, network)),
        Term(DENSE_OPTIMIZER, dense_optimizer_bytes(model, plan, stage, c, network)),
        Term(RECURRENT_ACTIVATIONS, recurrent_activation_bytes(plan, stage, c, model)),
        Term(ATTENTION_ACTIVATIONS, attention_activation_bytes(model, plan, stage, c)),
        Term(EDGE_ACTIVATIONS, edge_activation_bytes(model, plan, stage, c)),
        Term(LOGIT_BUFFER, logit_buffer_bytes(model, plan, stage, c, network)),
        Term(ALLOCATOR_RESIDUE, allocator_residue_bytes(c)),
    )
    return Footprint(network, stage.index, terms, plan.memory_budget_gib * GIB)


def footprint(
    model: ModelShape,
    plan: Plan,
    c: CapacityConstants = PAPER_CONSTANTS,
    network: str = ACTOR,
    stage: int | None = None,
) -> Footprint:
    """Per-device footprint of ``network`` under ``plan`` on the largest stage or the given one (Eq. 21).

    Args:
        model: the model shape.
        plan: the plan (assumed valid; see ``t1_capacity.plan.validate_plan``).
        c: the constants (alpha, b0, bytes per value).
        network: ``"actor"`` or ``"critic"``.
        stage: a pipeline stage index, or None for the stage with the largest total.

    Returns:
        The footprint; ``.terms`` in bytes, ``.total_gib``, ``.binding``, ``.headroom_gib``, ``.fits``.

    Raises:
        ValueError: unknown network, or pp not dividing the layer count, or stage out of range.
        TypeError: ``stage`` is not an integer (a bool such as True is refused, not read as stage 1).
    """
    if network not in (ACTOR, CRITIC):
        raise ValueError(f"network must be 'actor' or 'critic', got {network!r}")
    all_stages = stages(model, plan.pp)
    if stage is not None:
        if not isinstance(stage, numbers.Integral) or isinstance(stage, bool):
            raise TypeError(f"stage must be an integer pipeline stage index or None, got {stage!r}")
        if not 0 <= stage < plan.pp:
            raise ValueError(f"stage {stage} out of range for pp={plan.pp}")
        return stage_footprint(model, plan, all_stages[stage], c, network)
    candidates = [stage_footprint(model, plan, s, c, network) for s in _distinct_stages(all_stages)]
    return max(candidates, key=lambda f: f.total_bytes)


def _distinct_stages(all_stages: tuple[Stage, ...]) -> list[Stage]:
    """Stages that can differ in total: first, last, and one per distinct inner layer mix."""
    seen: set[tuple[int, int, bool, bool]] = set()
    out = []
    for s in all_stages:
        key = (s.n_attention, s.n_recurrent, s.first, s.last)
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


def stage_total_bytes_fast(
    model: ModelShape, plan: Plan, stage: Stage, c: CapacityConstants, network: str
) -> float:
    """One stage's total in bytes without building a ``Footprint`` (plan search inner loop), Eq. 21."""
    return (
        expert_weight_bytes(model, plan, stage, c)
        + expert_grad_bytes(model, plan, stage, c)
        + expert_optimizer_bytes(model, plan, stage, c)
        + (c.weight_bytes + c.grad_bytes + c.optimizer_bytes / (plan.dp * plan.cp))
        * dense_params_on_device(model, plan, stage, network)
        + recurrent_activation_bytes(plan, stage, c, model)
        + attention_activation_bytes(model, plan, stage, c)
        + edge_activation_bytes(model, plan, stage, c)
        + logit_buffer_bytes(model, plan, stage, c, network)
        + allocator_residue_bytes(c)
    )


def distinct_stages(model: ModelShape, pp: int) -> list[Stage]:
    """The stages whose totals can differ (first, last, one per distinct inner layer mix), ``[<= pp]``."""
    return _distinct_stages(stages(model, pp))


def total_gib_fast(model: ModelShape, plan: Plan, c: CapacityConstants, network: str) -> float:
    """The binding stage's total in GiB without building ``Footprint`` objects (plan search inner loop)."""
    totals = [stage_total_bytes_fast(model, plan, s, c, network) for s in distinct_stages(model, plan.pp)]
    return max(totals) / GIB
