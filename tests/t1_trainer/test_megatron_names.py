"""The HF <-> megatron-core weight name map on the tiny Qwen3.5-MoE of `recipes/tiny-cpu.yaml`.

Expected names and shapes are computed here from the config and megatron-core 0.19.2's module layouts
(``SelfAttention.linear_qkv`` per query group, ``GatedDeltaNet.in_proj`` sections, ``MLP.linear_fc1``
gate/up), not taken from the map.
"""

from __future__ import annotations

import pytest
import torch

from t1_policy import build_model, hf_config_from_spec
from t1_trainer.megatron.names import NameMapError, hf_to_megatron, megatron_names, megatron_to_hf


@pytest.fixture(scope="module")
def tiny(tiny_model_spec):
    model = build_model(tiny_model_spec, seed=0)
    return model.config, {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("layer_spec", ["local", "te"])
def test_tiny_state_dict_round_trips_bit_exact(tiny, layer_spec):
    config, sd = tiny
    mg = hf_to_megatron(sd, config, layer_spec=layer_spec)
    assert list(mg) == megatron_names(config, layer_spec=layer_spec)
    back = megatron_to_hf(mg, config, layer_spec=layer_spec)
    assert set(back) == set(sd)
    for key, tensor in sd.items():
        assert back[key].shape == tensor.shape, key
        assert back[key].dtype == tensor.dtype, key
        assert torch.equal(back[key], tensor), key


def test_megatron_shapes_follow_the_fused_layouts(tiny):
    config, sd = tiny
    mg = hf_to_megatron(sd, config)
    hidden, d, nh, ng = 64, 16, 4, 2  # recipes/tiny-cpu.yaml
    qkv_rows = ng * (2 * (nh // ng) + 2) * d  # q, gate, k, v per group
    in_proj_rows = 2 * (2 * 16) + 2 * (4 * 16) + 2 * 4  # q, k (2x16 each), v, z (4x16 each), beta, alpha
    assert mg["decoder.layers.3.self_attention.linear_qkv.weight"].shape == (qkv_rows, hidden)
    assert mg["decoder.layers.0.self_attention.in_proj.weight"].shape == (in_proj_rows, hidden)
    assert mg["decoder.layers.0.self_attention.conv1d.weight"].shape == (2 * 32 + 64, 1, 4)
    assert mg["decoder.layers.1.mlp.router.weight"].shape == (8, hidden)
    assert mg["decoder.layers.1.mlp.experts.local_experts.7.linear_fc1.weight"].shape == (2 * 32, hidden)
    assert mg["decoder.layers.1.mlp.experts.local_experts.7.linear_fc2.weight"].shape == (hidden, 32)
    assert mg["decoder.layers.2.mlp.shared_experts.linear_fc1.weight"].shape == (2 * 32, hidden)
    assert mg["decoder.layers.2.mlp.shared_experts.gate_weight"].shape == (1, hidden)
    assert mg["embedding.word_embeddings.weight"].shape == (248320, hidden)
    assert mg["output_layer.weight"].shape == (248320, hidden)
    # 3 GDN layers + 1 full attention: only layer 3 has q/k norms, only 0-2 have A_log
    assert "decoder.layers.3.self_attention.q_layernorm.weight" in mg
    assert not any(k.startswith("decoder.layers.3.self_attention.A_log") for k in mg)
    assert {f"decoder.layers.{i}.self_attention.A_log" for i in range(3)} <= set(mg)


def test_linear_qkv_packs_q_gate_k_v_per_query_group(tiny):
    config, sd = tiny
    d, hidden = 16, 64
    sd = dict(sd)
    # HF q_proj: per head [q (d rows), gate (d rows)]; tag each row with (head, part)
    tag = torch.arange(4 * 2 * d, dtype=torch.float32)[:, None].expand(-1, hidden).clone()
    sd["model.layers.3.self_attn.q_proj.weight"] = tag
    sd["model.layers.3.self_attn.k_proj.weight"] = torch.full((2 * d, hidden), -1.0)
    sd["model.layers.3.self_attn.k_proj.weight"][d:] = -2.0
    sd["model.layers.3.self_attn.v_proj.weight"] = torch.full((2 * d, hidden), -3.0)
    sd["model.layers.3.self_attn.v_proj.weight"][d:] = -4.0
    fused = hf_to_megatron(sd, config)["decoder.layers.3.self_attention.linear_qkv.weight"][:, 0]

    def q_rows(head):  # HF rows of head's query half
        return torch.arange(head * 2 * d, head * 2 * d + d, dtype=torch.float32)

    def gate_rows(head):
        return torch.arange(head * 2 * d + d, (head + 1) * 2 * d, dtype=torch.float32)

    group0 = torch.cat(
        [q_rows(0), q_rows(1), gate_rows(0), gate_rows(1), torch.full((d,), -1.0), torch.full((d,), -3.0)]
    )
    group1 = torch.cat(
        [q_rows(2), q_rows(3), gate_rows(2), gate_rows(3), torch.full((d,), -2.0), torch.full((d,), -4.0)]
    )
    assert torch.equal(fused, torch.cat([group0, group1]))


def test_gdn_in_proj_is_q_k_v_z_beta_alpha(tiny):
    config, sd = tiny
    mg = hf_to_megatron(sd, config)
    in_proj = mg["decoder.layers.1.self_attention.in_proj.weight"]
    a = "model.layers.1.linear_attn."
    expected = torch.cat([sd[f"{a}in_proj_{p}.weight"] for p in ("qkv", "z", "b", "a")])
    assert torch.equal(in_proj, expected)


def test_expert_fc1_keeps_gate_then_up(tiny):
    config, sd = tiny
    mg = hf_to_megatron(sd, config, layer_spec="te")
    hf = sd["model.layers.2.mlp.experts.gate_up_proj"]
    assert torch.equal(mg["decoder.layers.2.mlp.experts.linear_fc1.weight5"], hf[5])
    shared = mg["decoder.layers.2.mlp.shared_experts.linear_fc1.weight"]
    s = "model.layers.2.mlp.shared_expert."
    assert torch.equal(shared[:32], sd[f"{s}gate_proj.weight"])
    assert torch.equal(shared[32:], sd[f"{s}up_proj.weight"])


def test_te_spec_fuses_input_norms_and_shifts_the_gdn_out_norm(tiny):
    config, sd = tiny
    te = hf_to_megatron(sd, config, layer_spec="te")
    local = hf_to_megatron(sd, config, layer_spec="local")
    assert not any(k.endswith("input_layernorm.weight") for k in te)
    assert torch.equal(
        te["decoder.layers.3.self_attention.linear_qkv.layer_norm_weight"],
        sd["model.layers.3.input_layernorm.weight"],
    )
    assert torch.equal(
        te["decoder.layers.0.self_attention.in_proj.layer_norm_weight"],
        sd["model.layers.0.input_layernorm.weight"],
    )
    assert "decoder.layers.0.pre_mlp_layernorm.weight" in te  # the pre-MoE norm is never fused
    hf_out_norm = sd["model.layers.0.linear_attn.norm.weight"]
    assert torch.equal(hf_out_norm, torch.ones(16))  # HF initialises the gated norm to ones
    assert torch.equal(te["decoder.layers.0.self_attention.out_norm.weight"], torch.zeros(16))
    assert torch.equal(local["decoder.layers.0.self_attention.out_norm.weight"], hf_out_norm)


def test_out_norm_shift_round_trips_bit_exact_on_trained_range(tiny):
    config, sd = tiny
    sd = dict(sd)
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        w = (0.5 + 1.5 * torch.rand(16, generator=g)).to(dtype)
        sd["model.layers.0.linear_attn.norm.weight"] = w
        back = megatron_to_hf(hf_to_megatron(sd, config, layer_spec="te"), config, layer_spec="te")
        assert back["model.layers.0.linear_attn.norm.weight"].dtype == dtype
        assert torch.equal(back["model.layers.0.linear_attn.norm.weight"], w)


def test_missing_hf_key_is_refused_by_name(tiny):
    config, sd = tiny
    truncated = {k: v for k, v in sd.items() if k != "model.layers.2.linear_attn.in_proj_z.weight"}
    with pytest.raises(NameMapError, match=r"model\.layers\.2\.linear_attn\.in_proj_z\.weight"):
        hf_to_megatron(truncated, config)


def test_unknown_hf_key_is_refused_by_name(tiny):
    config, sd = tiny
    with pytest.raises(NameMapError, match=r"model\.layers\.0\.mlp\.gate\.bias"):
        hf_to_megatron({**sd, "model.layers.0.mlp.gate.bias": torch.zeros(8)}, config)


def test_megatron_side_refuses_unknown_and_missing_keys_but_skips_extra_state(tiny):
    config, sd = tiny
    mg = hf_to_megatron(sd, config, layer_spec="te")
    extra = {**mg, "decoder.layers.0.self_attention.in_proj._extra_state": torch.zeros(0)}
    assert set(megatron_to_hf(extra, config, layer_spec="te")) == set(sd)
    with pytest.raises(NameMapError, match=r"decoder\.layers\.1\.mlp\.router\.expert_bias"):
        megatron_to_hf(
            {**mg, "decoder.layers.1.mlp.router.expert_bias": torch.zeros(8)}, config, layer_spec="te"
        )
    del mg["decoder.layers.3.mlp.experts.linear_fc2.weight7"]
    with pytest.raises(NameMapError, match=r"linear_fc2\.weight7"):
        megatron_to_hf(mg, config, layer_spec="te")


def test_local_names_are_refused_under_the_te_spec(tiny):
    config, sd = tiny
    local = hf_to_megatron(sd, config, layer_spec="local")
    with pytest.raises(NameMapError):
        megatron_to_hf(local, config, layer_spec="te")


def test_tied_embeddings_keep_one_copy(tiny_model_spec):
    spec = tiny_model_spec.model_copy(update={"vocab_size": 512, "tie_word_embeddings": True})
    config = hf_config_from_spec(spec)
    sd = build_model(spec, seed=1).state_dict()
    assert "lm_head.weight" in sd
    mg = hf_to_megatron(sd, config)
    assert "output_layer.weight" not in mg
    back = megatron_to_hf(mg, config)
    assert torch.equal(back["lm_head.weight"], sd["model.embed_tokens.weight"])
    assert set(back) == set(sd)
