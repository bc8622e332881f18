"""Model shape and the parameter buckets the memory model shards differently (T1 §7.1).

The capacity model never needs the weights, only how many parameters of each kind sit on one device. The kinds
follow Megatron-Core's three buckets (TP-sharded, replicated, routed experts; see ``reference/capacity.md``
§1, §9) refined for a hybrid model: the recurrent (GatedDeltaNet) mixer is *not* tensor-sharded (T1 §7.1: "the
recurrent blocks are not tensor-sharded"), and the key/value projections of the full-attention mixer shard
only up to the number of key/value heads.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from functools import cached_property
from typing import Self

from t1_spec import ModelSpec

FULL_ATTENTION = "full_attention"
LINEAR_ATTENTION = "linear_attention"

# Sizes that must be at least 1 in every model, at least 0, and at least 1 when Gated DeltaNet layers exist.
_POSITIVE_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "full_attention_interval",
)
_NON_NEGATIVE_FIELDS = ("num_experts", "top_k", "moe_intermediate_size", "shared_expert_intermediate_size")
_LINEAR_FIELDS = (
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
)
_INT_FIELDS = _POSITIVE_FIELDS + _NON_NEGATIVE_FIELDS + _LINEAR_FIELDS


@dataclass(frozen=True)
class ModelShape:
    """The shape facts of a hybrid (GatedDeltaNet + gated attention) MoE decoder.

    Field names follow the Hugging Face ``Qwen3_5MoeConfig`` / ``t1_spec`` model section. Defaults are the
    paper's model, Qwen3.5-122B-A10B (T1 §2 and ``reference/capacity.md`` §11): 48 layers, every 4th full
    attention, top-8 of 256 experts, vocabulary 248,320.

    Attributes:
        vocab_size: vocabulary size |V| (tokens).
        hidden_size: model width h.
        num_layers: decoder layers L.
        num_experts: routed experts E per MoE layer; 0 = a dense model (the shared-expert width is then its
            MLP width, with no router and no gate).
        top_k: experts selected per token.
        moe_intermediate_size: routed expert FFN width.
        shared_expert_intermediate_size: shared expert FFN width (0 = none).
        num_attention_heads: query heads of the full-attention mixer.
        num_key_value_heads: key/value heads of the full-attention mixer (GQA groups).
        head_dim: per-head width of the full-attention mixer.
        linear_num_key_heads: GatedDeltaNet key heads.
        linear_num_value_heads: GatedDeltaNet value heads.
        linear_key_head_dim: GatedDeltaNet key head width.
        linear_value_head_dim: GatedDeltaNet value head width.
        linear_conv_kernel_dim: GatedDeltaNet short-convolution kernel width.
        full_attention_interval: every ``full_attention_interval``-th layer is full attention.
        tie_word_embeddings: whether the LM head shares the embedding matrix.
        qk_norm: whether full attention has query/key RMSNorms (Qwen3.5: yes; a classic GPT: no).
        declared_expert_params: the paper's P_e (T1 §7.1: 116.0B), reported next to the structural count.
        declared_dense_params: the paper's P_d (T1 §7.1: 5.86B), reported next to the structural count.

    Raises:
        TypeError: a size that is not an integer (a bool or a float such as 48.0 included), or
            ``tie_word_embeddings`` / ``qk_norm`` not a bool; the message names the field.
        ValueError: naming the field: a size that would price nothing or has no meaning: ``vocab_size``,
            ``hidden_size``, ``num_layers``, the attention head counts, ``head_dim`` or
            ``full_attention_interval`` below 1; ``num_experts`` or ``shared_expert_intermediate_size``
            below 0; a routed model (E >= 1) with ``top_k`` outside [1, E] or ``moe_intermediate_size`` < 1;
            a model with Gated DeltaNet layers whose ``linear_*`` sizes are below 1; a declared count that is
            not a finite number > 0.
    """

    vocab_size: int = 248_320
    hidden_size: int = 3072
    num_layers: int = 48
    num_experts: int = 256
    top_k: int = 8
    moe_intermediate_size: int = 1024
    shared_expert_intermediate_size: int = 1024
    num_attention_heads: int = 32
    num_key_value_heads: int = 2
    head_dim: int = 256
    linear_num_key_heads: int = 16
    linear_num_value_heads: int = 64
    linear_key_head_dim: int = 128
    linear_value_head_dim: int = 128
    linear_conv_kernel_dim: int = 4
    full_attention_interval: int = 4
    tie_word_embeddings: bool = False
    qk_norm: bool = True
    declared_expert_params: float | None = 116.0e9
    declared_dense_params: float | None = 5.86e9

    def __post_init__(self) -> None:
        for name in _INT_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, numbers.Integral) or isinstance(value, bool):
                kind = type(value).__name__
                raise TypeError(f"ModelShape.{name} must be an integer, got {value!r} ({kind})")
        for name in ("tie_word_embeddings", "qk_norm"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"ModelShape.{name} must be a bool, got {getattr(self, name)!r}")
        at_least = dict.fromkeys(_POSITIVE_FIELDS, 1) | dict.fromkeys(_NON_NEGATIVE_FIELDS, 0)
        if self.num_experts >= 1:
            at_least |= {"top_k": 1, "moe_intermediate_size": 1}
        if self.full_attention_interval > 1:  # Gated DeltaNet layers exist
            at_least |= dict.fromkeys(_LINEAR_FIELDS, 1)
        for name, low in at_least.items():
            if getattr(self, name) < low:
                raise ValueError(f"ModelShape.{name} must be >= {low}, got {getattr(self, name)}")
        if self.num_experts >= 1 and self.top_k > self.num_experts:
            raise ValueError(f"ModelShape.top_k={self.top_k} exceeds num_experts={self.num_experts}")
        for name in ("declared_expert_params", "declared_dense_params"):
            value = getattr(self, name)
            if value is None:
                continue
            ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
            if not ok or value <= 0:
                raise ValueError(f"ModelShape.{name} must be None or a finite count > 0, got {value!r}")

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> Self:
        """The shape of a validated ``t1_spec.ModelSpec``: every size field is read from the spec.

        ``qk_norm`` is not a recipe field (every model the spec describes is a Qwen3.5 hybrid, which has
        query/key norms), so it keeps its ``True``.

        Args:
            spec: the recipe's ``model`` section.

        Returns:
            The shape the memory model prices.
        """
        return cls(
            vocab_size=spec.vocab_size,
            hidden_size=spec.hidden_size,
            num_layers=spec.num_layers,
            num_experts=spec.num_experts,
            top_k=spec.top_k,
            moe_intermediate_size=spec.moe_intermediate_size,
            shared_expert_intermediate_size=spec.shared_expert_intermediate_size,
            num_attention_heads=spec.num_attention_heads,
            num_key_value_heads=spec.num_key_value_heads,
            head_dim=spec.head_dim,
            linear_num_key_heads=spec.linear_num_key_heads,
            linear_num_value_heads=spec.linear_num_value_heads,
            linear_key_head_dim=spec.linear_key_head_dim,
            linear_value_head_dim=spec.linear_value_head_dim,
            linear_conv_kernel_dim=spec.linear_conv_kernel_dim,
            full_attention_interval=spec.full_attention_interval,
            tie_word_embeddings=spec.tie_word_embeddings,
            declared_expert_params=spec.declared_expert_params,
            declared_dense_params=spec.declared_dense_params,
        )

    @cached_property
    def layer_types(self) -> tuple[str, ...]:
        """Mixer kind per layer, ``[L]``: every ``full_attention_interval``-th layer is attention."""
        k = self.full_attention_interval
        return tuple(FULL_ATTENTION if (i + 1) % k == 0 else LINEAR_ATTENTION for i in range(self.num_layers))

    # Per-layer parameter counts (SwiGLU = 3 matrices; RMSNorm = h). Megatron-style count: the attention
    # output gate is not counted, which is how the paper's P_d = 5.86B comes out (reference/capacity.md §11).

    @property
    def expert_params_per_layer(self) -> int:
        """Routed-expert parameters of one MoE layer: 3 h F_moe E."""
        return 3 * self.hidden_size * self.moe_intermediate_size * self.num_experts

    @property
    def shared_expert_params_per_layer(self) -> int:
        """Shared-expert parameters of one layer (3 h F_shared), TP-sharded like a dense MLP."""
        return 3 * self.hidden_size * self.shared_expert_intermediate_size

    @property
    def replicated_params_per_layer(self) -> int:
        """Router (h E), shared-expert gate (h) and the two layer norms (2 h): replicated across TP."""
        h = self.hidden_size
        gate = h if self.shared_expert_intermediate_size and self.num_experts else 0
        return h * self.num_experts + gate + 2 * h

    @property
    def attention_qo_params(self) -> int:
        """Query and output projections of a full-attention layer (2 h a d_head): shard over every TP rank."""
        return 2 * self.hidden_size * self.num_attention_heads * self.head_dim

    @property
    def attention_kv_params(self) -> int:
        """Key and value projections (2 h g d_head): shard over at most g = ``num_key_value_heads`` ranks."""
        return 2 * self.hidden_size * self.num_key_value_heads * self.head_dim

    @property
    def attention_replicated_params(self) -> int:
        """Query/key norms of a full-attention layer (2 d_head), replicated."""
        return 2 * self.head_dim if self.qk_norm else 0

    @property
    def recurrent_params(self) -> int:
        """GatedDeltaNet mixer parameters of one layer: not tensor-sharded (T1 §7.1).

        in_proj_qkvz h (2 Dk + 2 Dv) + in_proj_ba h (2 Hv) + short conv (2 Dk + Dv) K + out_proj Dv h
        + A_log and dt_bias (2 Hv) + gated norm (d_v).
        """
        h = self.hidden_size
        dk = self.linear_num_key_heads * self.linear_key_head_dim
        dv = self.linear_num_value_heads * self.linear_value_head_dim
        hv = self.linear_num_value_heads
        return (
            h * (2 * dk + 2 * dv)
            + h * 2 * hv
            + (2 * dk + dv) * self.linear_conv_kernel_dim
            + dv * h
            + 2 * hv
            + self.linear_value_head_dim
        )

    @property
    def embedding_params(self) -> int:
        """One vocabulary matrix |V| h (embedding, or the untied LM head), vocab-parallel over TP."""
        return self.vocab_size * self.hidden_size

    @cached_property
    def expert_params(self) -> int:
        """Structural routed-expert count P_e over all layers (115.96B for the paper's model)."""
        return self.expert_params_per_layer * self.num_layers

    @cached_property
    def dense_params(self) -> int:
        """Structural dense count P_d: everything but routed experts (about 5.85B for the paper's model)."""
        n_attn = sum(t == FULL_ATTENTION for t in self.layer_types)
        n_rec = self.num_layers - n_attn
        per_layer = self.shared_expert_params_per_layer + self.replicated_params_per_layer
        attn = self.attention_qo_params + self.attention_kv_params + self.attention_replicated_params
        heads = 1 if self.tie_word_embeddings else 2
        return (
            self.num_layers * per_layer
            + n_attn * attn
            + n_rec * self.recurrent_params
            + heads * self.embedding_params
            + self.hidden_size  # final norm
        )


PAPER_MODEL = ModelShape()
"""Qwen3.5-122B-A10B as the paper trains it (T1 §2, §7.1)."""
