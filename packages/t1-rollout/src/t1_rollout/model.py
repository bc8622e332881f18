"""The policy model: a text-only Qwen3.5-MoE built from a `ModelSpec`, and the log-prob both sides compute.

The embedded engine samples from this model and the torch trainer differentiates it, so the two share
`build_model` (same architecture, same seeded weights) and `token_logprobs` (same quantity): the rollout
log-prob and the trainer's log-prob differ only by the numerics that T1 §4.4 measures, never by definition.
"""

from __future__ import annotations

import logging
from typing import Protocol

import torch
from transformers.models.qwen3_5_moe import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

__all__ = [
    "QWEN35_NUM_REAL_TOKENS",
    "ModelSpecLike",
    "build_model",
    "hf_config_from_spec",
    "logprob_vector",
    "num_real_tokens",
    "silence_kernel_fallback_warnings",
    "token_logprobs",
]

QWEN35_NUM_REAL_TOKENS = 248077
"""Ids ``>= 248077`` of the 248,320-row Qwen3.5 embedding are padding, not tokens (the tokenizer's last
special token is 248076). Sampling masks them and `token_logprobs` normalises over the real ids only."""


class ModelSpecLike(Protocol):
    """What `hf_config_from_spec` reads; `t1_spec.ModelSpec` (or any object with these attributes)."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_experts: int
    top_k: int
    moe_intermediate_size: int
    shared_expert_intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    linear_num_key_heads: int
    linear_num_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int
    full_attention_interval: int
    max_position_embeddings: int
    tie_word_embeddings: bool


class _DropKernelFallbackWarning(logging.Filter):
    """Drops transformers' "falling back to its reference PyTorch implementation" notices.

    On the CPU the causal_conv1d / flash-linear-attention kernels cannot exist; the reference path is the
    intended one, so the notice is noise in every log.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return "falling back to its reference PyTorch implementation" not in record.getMessage()


_FILTER = _DropKernelFallbackWarning()


def silence_kernel_fallback_warnings() -> None:
    """Silences transformers' kernel-fallback warnings (idempotent). Other warnings stay visible."""
    hub_logger = logging.getLogger("transformers.integrations.hub_kernels")
    if _FILTER not in hub_logger.filters:
        hub_logger.addFilter(_FILTER)


def num_real_tokens(vocab_size: int) -> int:
    """Number of sampleable ids: ``min(vocab_size, 248077)`` (Qwen3.5 pads its vocabulary to 248,320)."""
    return min(vocab_size, QWEN35_NUM_REAL_TOKENS)


def _layer_types(num_layers: int, full_attention_interval: int) -> list[str]:
    # Qwen3.5 hybrid layout: every `interval`-th layer is full attention, the others Gated DeltaNet.
    return [
        "full_attention" if (i + 1) % full_attention_interval == 0 else "linear_attention"
        for i in range(num_layers)
    ]


def hf_config_from_spec(model_spec: ModelSpecLike) -> Qwen3_5MoeTextConfig:
    """Builds the `transformers` Qwen3.5-MoE text config of a `ModelSpec`.

    Every layer is a sparse MoE block (routed experts plus a gated shared expert); the attention layout is
    hybrid, full attention every ``full_attention_interval`` layers and linear (Gated DeltaNet) elsewhere.
    The router's load-balancing loss is off (T1 §4.3: coefficient 0).

    Args:
        model_spec: a `t1_spec.ModelSpec` or any object with the `ModelSpecLike` attributes.

    Returns:
        The `Qwen3_5MoeTextConfig`.

    Raises:
        ValueError: when ``top_k > num_experts`` or ``full_attention_interval < 1``.
    """
    s = model_spec
    if s.top_k > s.num_experts:
        raise ValueError(
            f"model spec: top_k={s.top_k} exceeds num_experts={s.num_experts}; lower model.top_k"
        )
    if s.full_attention_interval < 1:
        raise ValueError(f"model spec: full_attention_interval={s.full_attention_interval} must be >= 1")
    return Qwen3_5MoeTextConfig(
        vocab_size=s.vocab_size,
        hidden_size=s.hidden_size,
        num_hidden_layers=s.num_layers,
        num_attention_heads=s.num_attention_heads,
        num_key_value_heads=s.num_key_value_heads,
        head_dim=s.head_dim,
        linear_num_key_heads=s.linear_num_key_heads,
        linear_num_value_heads=s.linear_num_value_heads,
        linear_key_head_dim=s.linear_key_head_dim,
        linear_value_head_dim=s.linear_value_head_dim,
        linear_conv_kernel_dim=s.linear_conv_kernel_dim,
        moe_intermediate_size=s.moe_intermediate_size,
        shared_expert_intermediate_size=s.shared_expert_intermediate_size,
        num_experts=s.num_experts,
        num_experts_per_tok=s.top_k,
        max_position_embeddings=s.max_position_embeddings,
        tie_word_embeddings=s.tie_word_embeddings,
        layer_types=_layer_types(s.num_layers, s.full_attention_interval),
        router_aux_loss_coef=0.0,
        output_router_logits=False,
    )


def build_model(
    model_spec: ModelSpecLike, *, seed: int, dtype: torch.dtype = torch.float32
) -> Qwen3_5MoeForCausalLM:
    """Builds the policy with random weights drawn from ``seed`` (same seed -> bit-identical weights).

    The global torch RNG is left as it was (the draw runs under `torch.random.fork_rng`).

    Args:
        model_spec: see `hf_config_from_spec`.
        seed: weight-initialisation seed.
        dtype: parameter dtype (float32 on the CPU).

    Returns:
        A `Qwen3_5MoeForCausalLM` in eval mode on the CPU.
    """
    silence_kernel_fallback_warnings()
    config = hf_config_from_spec(model_spec)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3_5MoeForCausalLM(config)
    return model.to(dtype=dtype).eval()


def logprob_vector(
    logits: torch.Tensor, temperature: float = 1.0, *, vocab_limit: int | None = None
) -> torch.Tensor:
    """``log_softmax(logits / temperature)`` over the real ids: the distribution `token_logprobs` reads.

    Args:
        logits: float ``[..., vocab]``.
        temperature: >= 0; 0 (greedy) is scored at temperature 1, as SGLang does.
        vocab_limit: keep ids ``< vocab_limit`` only; None = all.

    Returns:
        float32 ``[..., vocab_limit]`` log-probabilities.

    Raises:
        ValueError: negative temperature.
    """
    if temperature < 0:
        raise ValueError(f"temperature={temperature} must be >= 0")
    if vocab_limit is not None:
        logits = logits[..., :vocab_limit]
    scale = 1.0 if temperature == 0 else temperature
    return torch.log_softmax(logits.float() / scale, dim=-1)


def token_logprobs(
    logits: torch.Tensor, ids: torch.Tensor, temperature: float = 1.0, *, vocab_limit: int | None = None
) -> torch.Tensor:
    """Log-probability of ``ids`` under ``log_softmax(logits / temperature)``: the rollout log-prob.

    This is the quantity the engine reports and the trainer recomputes (T1 §4.4 compares the two). As in
    SGLang, top-p / top-k truncation does NOT renormalise it: it is the log-prob under the temperature-scaled
    full distribution. ``temperature == 0`` (greedy) is scored at temperature 1, as SGLang does.

    Args:
        logits: float ``[..., vocab]``.
        ids: int64 ``[...]`` (same leading shape), the tokens to score.
        temperature: sampling temperature (>= 0).
        vocab_limit: normalise over ids ``< vocab_limit`` only (the real, sampleable ids; see
            `num_real_tokens`); None = the whole last dimension.

    Returns:
        float32 ``[...]`` log-probabilities (differentiable w.r.t. ``logits``).

    Raises:
        ValueError: negative temperature, or an id outside ``[0, vocab_limit)``.
    """
    logp = logprob_vector(logits, temperature, vocab_limit=vocab_limit)
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= logp.shape[-1]):
        raise ValueError(
            f"token ids must lie in [0, {logp.shape[-1]}); got [{int(ids.min())}, {int(ids.max())}]"
        )
    return logp.gather(-1, ids.long().unsqueeze(-1)).squeeze(-1)
