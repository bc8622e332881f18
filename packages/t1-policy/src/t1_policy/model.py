"""The policy: a text-only Qwen3.5-MoE built from a `t1_spec.ModelSpec`, with seeded random weights.

The embedded engine serves this model and the torch trainer trains a copy of it, so both start from the same
architecture and the same weights (same spec, same seed -> bit-identical parameters).
"""

from __future__ import annotations

import logging

import torch
from transformers.models.qwen3_5_moe import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

from t1_spec import ModelSpec

__all__ = ["build_model", "hf_config_from_spec", "silence_kernel_fallback_warnings"]


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


def _layer_types(num_layers: int, full_attention_interval: int) -> list[str]:
    # Qwen3.5 hybrid layout: every `interval`-th layer is full attention, the others Gated DeltaNet.
    return [
        "full_attention" if (i + 1) % full_attention_interval == 0 else "linear_attention"
        for i in range(num_layers)
    ]


def hf_config_from_spec(model_spec: ModelSpec) -> Qwen3_5MoeTextConfig:
    """Builds the `transformers` Qwen3.5-MoE text config of a `ModelSpec`.

    Every layer is a sparse MoE block (routed experts plus a gated shared expert); the attention layout is
    hybrid, full attention every ``full_attention_interval`` layers and linear (Gated DeltaNet) elsewhere.
    The router's load-balancing loss is off (T1 §4.3: coefficient 0).

    Args:
        model_spec: the recipe's model section.

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
    model_spec: ModelSpec, *, seed: int, dtype: torch.dtype = torch.float32
) -> Qwen3_5MoeForCausalLM:
    """Builds the policy with random weights drawn from ``seed`` (same seed -> bit-identical weights).

    The global torch RNG is left as it was (the draw runs under `torch.random.fork_rng`).

    Args:
        model_spec: the recipe's model section (see `hf_config_from_spec`).
        seed: weight-initialisation seed.
        dtype: parameter dtype (float32 on the CPU).

    Returns:
        A `Qwen3_5MoeForCausalLM` in eval mode on the CPU.

    Raises:
        ValueError: from `hf_config_from_spec`.
    """
    silence_kernel_fallback_warnings()
    config = hf_config_from_spec(model_spec)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3_5MoeForCausalLM(config)
    return model.to(dtype=dtype).eval()
