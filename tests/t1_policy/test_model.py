from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from t1_policy import (
    QWEN35_NUM_REAL_TOKENS,
    build_model,
    hf_config_from_spec,
    num_real_tokens,
    token_logprobs,
)


def test_same_seed_gives_bit_identical_weights_and_other_seed_does_not(tiny_model_spec):
    spec = tiny_model_spec
    a, b, c = build_model(spec, seed=7), build_model(spec, seed=7), build_model(spec, seed=8)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[n], sb[n]) for n in sa)
    assert not torch.equal(sa["model.layers.0.mlp.gate.weight"], sc["model.layers.0.mlp.gate.weight"])


def test_build_model_leaves_global_rng_alone(tiny_model_spec):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_model(tiny_model_spec.model_copy(update={"num_layers": 1, "full_attention_interval": 1}), seed=0)
    assert torch.equal(torch.rand(3), expected)


def test_qwen35_hybrid_layout_every_fourth_layer_full_attention(tiny_model_spec):
    cfg = hf_config_from_spec(tiny_model_spec.model_copy(update={"num_layers": 8}))
    assert cfg.layer_types == ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 + [
        "full_attention"
    ]


def test_router_load_balancing_loss_is_off(tiny_model_spec):
    # T1 §4.3: MoE load-balancing coefficient 0.
    assert hf_config_from_spec(tiny_model_spec).router_aux_loss_coef == 0.0


def test_every_layer_is_moe_with_spec_experts(tiny_model_spec):
    model = build_model(tiny_model_spec, seed=0)
    for layer in model.model.layers:
        assert layer.mlp.gate.num_experts == 8 and layer.mlp.gate.top_k == 2


def test_builds_from_tiny_recipe_model_section():
    from t1_spec import ModelSpec

    recipe = yaml.safe_load((Path(__file__).parents[2] / "recipes" / "tiny-cpu.yaml").read_text())
    model = build_model(ModelSpec(**recipe["model"]), seed=0)
    assert model.config.num_hidden_layers == recipe["model"]["num_layers"]


def test_top_k_above_experts_is_refused(tiny_model_spec):
    with pytest.raises(ValueError, match="top_k=9 exceeds num_experts=8"):
        hf_config_from_spec(tiny_model_spec.model_copy(update={"top_k": 9}))


def test_token_logprobs_is_temperature_scaled_log_softmax():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 7))
    ids = np.array([0, 4, 6])
    t = 0.7
    z = logits / t
    expected = z[np.arange(3), ids] - np.log(np.exp(z).sum(-1))
    got = token_logprobs(torch.tensor(logits, dtype=torch.float32), torch.tensor(ids), t)
    np.testing.assert_allclose(got.numpy(), expected, atol=1e-5)


def test_token_logprobs_normalises_over_real_ids_only():
    logits = torch.tensor([[1.0, 2.0, 50.0]])  # id 2 is a padded row
    got = token_logprobs(logits, torch.tensor([1]), 1.0, vocab_limit=2)
    assert float(got) == pytest.approx(2.0 - np.log(np.exp(1.0) + np.exp(2.0)), abs=1e-6)
    with pytest.raises(ValueError, match="token ids must lie in"):
        token_logprobs(logits, torch.tensor([2]), 1.0, vocab_limit=2)


def test_greedy_logprob_is_reported_at_temperature_one():
    logits = torch.tensor([0.0, 1.0])
    assert float(token_logprobs(logits, torch.tensor(1), 0.0)) == pytest.approx(
        -np.log1p(np.exp(-1.0)), abs=1e-6
    )


def test_qwen35_padded_vocab_starts_at_248077():
    assert (
        QWEN35_NUM_REAL_TOKENS == 248077 and num_real_tokens(248320) == 248077 and num_real_tokens(512) == 512
    )
