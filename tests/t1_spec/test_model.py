"""Parameter counts of the Qwen3.5 hybrid MoE, checked against the paper and an independent count."""

from __future__ import annotations

import pytest

from t1_spec import load_recipe

# Counted independently with transformers 5.24 (Qwen3_5MoeForCausalLM built on the meta device, summing
# `numel` of every parameter; experts = names containing ".experts."). The slow test below recounts them.
HF_122B_TOTAL = 122_111_526_912
HF_122B_EXPERT = 115_964_116_992
HF_TINY_TOTAL = 32_077_736
HF_TINY_EXPERT = 196_608


def test_expert_params_match_the_paper_116b(prod) -> None:
    # T1 §7.1: P_e = 116.0B; (L, k, E) = (48, 8, 256).
    assert prod.model.expert_params() == 3 * 3072 * 1024 * 256 * 48
    assert abs(prod.model.expert_params() - 116.0e9) / 116.0e9 < 0.001


def test_dense_count_without_output_gate_is_the_papers_5_86b(prod) -> None:
    # The paper's 5.86B omits the attention output gate, 12 layers x 3072 x (32 * 256) (capacity.md §11).
    m = prod.model
    gate = 12 * 3072 * 32 * 256
    assert m.dense_params(True) - m.dense_params(False) == gate
    assert abs(m.dense_params(False) - 5.86e9) / 5.86e9 < 0.005


def test_counts_match_transformers_module_shapes(prod, tiny) -> None:
    assert prod.model.total_params() == HF_122B_TOTAL
    assert prod.model.expert_params() == HF_122B_EXPERT
    assert tiny.model.total_params() == HF_TINY_TOTAL
    assert tiny.model.expert_params() == HF_TINY_EXPERT


def test_active_params_is_about_10b(prod) -> None:
    # "A10B": dense plus 8 of 256 experts per layer.
    active = prod.model.active_params()
    assert active == prod.model.dense_params() + 3 * 3072 * 1024 * 8 * 48
    assert 9.5e9 < active < 10.5e9


def test_layer_pattern_has_every_fourth_layer_full_attention(prod, tiny) -> None:
    types = prod.model.layer_types
    assert len(types) == 48
    assert [i for i, t in enumerate(types) if t == "full_attention"] == list(range(3, 48, 4))
    assert tiny.model.layer_types == ["linear_attention"] * 3 + ["full_attention"]


def test_declared_expert_count_off_names_the_field(prod_path, problems_of) -> None:
    probs = problems_of(prod_path, "model.declared_expert_params=100e9")
    assert [p.field for p in probs] == ["model.declared_expert_params"]
    assert "115.96" in probs[0].message or "1.16e+11" in probs[0].message


def test_declared_dense_count_accepts_either_convention(prod_path, problems_of) -> None:
    load_recipe(prod_path, ["model.declared_dense_params=6.15e9"])  # every tensor counted
    load_recipe(prod_path, ["model.declared_dense_params=5.86e9"])  # paper convention
    probs = problems_of(prod_path, "model.declared_dense_params=5.0e9")
    assert probs[0].field == "model.declared_dense_params"
    assert "without the attention output gate" in probs[0].message


@pytest.mark.slow
def test_counts_recounted_with_transformers(prod_path, tiny_path) -> None:
    torch = pytest.importorskip("torch")
    from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeTextConfig
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeForCausalLM

    for path, total, expert in (
        (prod_path, HF_122B_TOTAL, HF_122B_EXPERT),
        (tiny_path, HF_TINY_TOTAL, HF_TINY_EXPERT),
    ):
        m = load_recipe(path).model
        cfg = Qwen3_5MoeTextConfig(
            vocab_size=m.vocab_size,
            hidden_size=m.hidden_size,
            num_hidden_layers=m.num_layers,
            num_attention_heads=m.num_attention_heads,
            num_key_value_heads=m.num_key_value_heads,
            head_dim=m.head_dim,
            linear_conv_kernel_dim=m.linear_conv_kernel_dim,
            linear_key_head_dim=m.linear_key_head_dim,
            linear_value_head_dim=m.linear_value_head_dim,
            linear_num_key_heads=m.linear_num_key_heads,
            linear_num_value_heads=m.linear_num_value_heads,
            moe_intermediate_size=m.moe_intermediate_size,
            shared_expert_intermediate_size=m.shared_expert_intermediate_size,
            num_experts_per_tok=m.top_k,
            num_experts=m.num_experts,
            tie_word_embeddings=m.tie_word_embeddings,
        )
        with torch.device("meta"):
            hf = Qwen3_5MoeForCausalLM(cfg)
        assert sum(p.numel() for p in hf.parameters()) == total
        assert sum(p.numel() for n, p in hf.named_parameters() if ".experts." in n) == expert
        assert list(cfg.layer_types) == m.layer_types
