"""Not `tiny_model_spec`: t1_r3 sits below t1_rollout, so it builds from transformers (512 vocab: fast)."""

import logging

import pytest
import torch
from transformers.models.qwen3_5_moe import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

logging.getLogger("transformers.integrations.hub_kernels").setLevel(logging.ERROR)


def tiny_moe(
    num_layers: int = 4, num_experts: int = 8, top_k: int = 2, seed: int = 0
) -> Qwen3_5MoeForCausalLM:
    """A small Qwen3.5-MoE built directly from transformers (t1_r3 sits below t1_rollout)."""
    cfg = Qwen3_5MoeTextConfig(
        vocab_size=512,
        hidden_size=64,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=32,
        num_experts=num_experts,
        num_experts_per_tok=top_k,
        max_position_embeddings=1024,
        router_aux_loss_coef=0.0,
        layer_types=[
            "full_attention" if i % 4 == 3 or i == num_layers - 1 else "linear_attention"
            for i in range(num_layers)
        ],
    )
    torch.manual_seed(seed)
    return Qwen3_5MoeForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def model() -> Qwen3_5MoeForCausalLM:
    return tiny_moe()


@pytest.fixture
def make_model():
    return tiny_moe


@pytest.fixture
def ids() -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, 512, (1, 24), generator=g)
