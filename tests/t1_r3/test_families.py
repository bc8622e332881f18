"""R3 on every registered HF MoE family: capture live -> replay -> same experts, same logits (T1 §4.2)."""

import base64
import logging

import numpy as np
import pytest
import torch
from torch import nn
from transformers import (
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    OlmoeConfig,
    OlmoeForCausalLM,
    Qwen2MoeConfig,
    Qwen2MoeForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)
from transformers.models.qwen3_5_moe import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

from t1_r3 import (
    ROUTER_FAMILIES,
    RoutingMismatchError,
    capture_routing,
    decode_routed_experts,
    moe_layers,
    moe_routers,
    replay_routing,
)

# ---- tiny random models of every family, from their transformers configs ----

logging.getLogger("transformers.integrations.hub_kernels").setLevel(logging.ERROR)

VOCAB = 256
COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    tie_word_embeddings=False,
)


def _qwen3_5(num_layers: int, **kw):
    cfg = Qwen3_5MoeTextConfig(
        **COMMON,
        num_hidden_layers=num_layers,
        head_dim=8,
        linear_num_key_heads=2,
        linear_num_value_heads=2,
        linear_key_head_dim=8,
        linear_value_head_dim=8,
        moe_intermediate_size=16,
        shared_expert_intermediate_size=16,
        num_experts=8,
        num_experts_per_tok=2,
        router_aux_loss_coef=0.0,
        layer_types=["linear_attention"] * (num_layers - 1) + ["full_attention"],
        **kw,
    )
    return Qwen3_5MoeForCausalLM(cfg)


def _qwen3(num_layers: int, **kw):
    cfg = Qwen3MoeConfig(
        **COMMON,
        num_hidden_layers=num_layers,
        head_dim=8,
        intermediate_size=32,
        moe_intermediate_size=16,
        num_experts=8,
        num_experts_per_tok=2,
        norm_topk_prob=True,
        **kw,
    )
    return Qwen3MoeForCausalLM(cfg)


def _qwen2(num_layers: int, **kw):
    cfg = Qwen2MoeConfig(
        **COMMON,
        num_hidden_layers=num_layers,
        intermediate_size=32,
        moe_intermediate_size=16,
        shared_expert_intermediate_size=16,
        num_experts=8,
        num_experts_per_tok=2,
        norm_topk_prob=False,  # Qwen1.5/2-MoE's default: weights not renormalised over the k
        **kw,
    )
    return Qwen2MoeForCausalLM(cfg)


def _mixtral(num_layers: int, **kw):
    cfg = MixtralConfig(
        **COMMON,
        num_hidden_layers=num_layers,
        intermediate_size=16,
        num_local_experts=8,
        num_experts_per_tok=2,
        **kw,
    )
    return MixtralForCausalLM(cfg)


def _olmoe(num_layers: int, **kw):
    cfg = OlmoeConfig(
        **COMMON,
        num_hidden_layers=num_layers,
        intermediate_size=16,
        num_experts=8,
        num_experts_per_tok=2,
        **kw,
    )
    return OlmoeForCausalLM(cfg)


def _deepseek_v3(num_layers: int, **kw):
    kw.setdefault("first_k_dense_replace", 0)
    cfg = DeepseekV3Config(
        **COMMON,
        num_hidden_layers=num_layers,
        intermediate_size=32,
        moe_intermediate_size=16,
        n_routed_experts=16,
        n_shared_experts=1,
        num_experts_per_tok=4,
        n_group=4,
        topk_group=2,
        routed_scaling_factor=2.5,
        kv_lora_rank=16,
        q_lora_rank=16,
        qk_rope_head_dim=4,
        qk_nope_head_dim=4,
        v_head_dim=8,
        **kw,
    )
    model = DeepseekV3ForCausalLM(cfg)
    with torch.no_grad():  # a trained model's correction bias is not zero; make it matter for selection
        for m in model.modules():
            if hasattr(m, "e_score_correction_bias"):
                m.e_score_correction_bias.copy_(torch.randn(m.e_score_correction_bias.shape) * 0.3)
    return model


BUILDERS = {
    "qwen3_5_moe": _qwen3_5,
    "qwen3_moe": _qwen3,
    "qwen2_moe": _qwen2,
    "mixtral": _mixtral,
    "olmoe": _olmoe,
    "deepseek_v3": _deepseek_v3,
}
"""Family name (as in `t1_r3.ROUTER_FAMILIES`) -> builder ``(num_layers, **config overrides) -> model``."""

# (family, config overrides making some layers dense, the decoder layers that stay MoE), out of 4 layers
DENSE_CASES = [
    ("qwen3_moe", {"mlp_only_layers": [1]}, [0, 2, 3]),
    ("qwen3_moe", {"decoder_sparse_step": 2}, [1, 3]),
    ("qwen2_moe", {"mlp_only_layers": [0, 2]}, [1, 3]),
    ("deepseek_v3", {"first_k_dense_replace": 1}, [1, 2, 3]),
]


def build(family: str, num_layers: int = 3, seed: int = 0, **overrides):
    """A tiny random model of ``family`` in eval mode (seeded)."""
    torch.manual_seed(seed)
    return BUILDERS[family](num_layers, **overrides).eval()


FAMILIES = sorted(BUILDERS)


def _ids(n=12, seed=1):
    return torch.randint(0, 256, (1, n), generator=torch.Generator().manual_seed(seed))


def _router_outputs(model):
    """Hooks registered after replay's: what each router hands its MoE block."""
    seen: list[tuple] = []
    handles = [
        r.register_forward_hook(lambda m, a, out, i=i: seen.append((i, *(o.detach().clone() for o in out))))
        for i, r in enumerate(moe_routers(model))
    ]
    return seen, handles


def test_every_registered_family_is_tested():
    assert set(BUILDERS) == set(ROUTER_FAMILIES)
    wanted = {"qwen3_5_moe", "qwen3_moe", "qwen2_moe", "mixtral", "olmoe", "deepseek_v3"}
    assert wanted <= set(ROUTER_FAMILIES)


@pytest.mark.parametrize("family", FAMILIES)
def test_replay_of_live_capture_gives_identical_experts_and_logits(family):
    model = build(family)
    ids = _ids()
    with capture_routing(model) as rec, torch.no_grad():
        live = model(ids).logits
    routing = rec.rows()[: ids.shape[1] - 1]
    assert routing.dtype == np.uint8  # E <= 256: one byte per expert id
    with replay_routing(model, routing), capture_routing(model) as again, torch.no_grad():
        replayed = model(ids).logits
    np.testing.assert_array_equal(again.rows()[:-1], routing)
    assert torch.equal(replayed, live)  # bit-identical at every position, the last (live-routed) included


def _foreign_record(model, rows, seed=2):
    """Distinct random experts per row and layer, unrelated to what the model would pick."""
    r = moe_routers(model)[0]
    g = np.random.default_rng(seed)
    e, k = int(r.num_experts), int(r.top_k)
    return np.argsort(g.random((rows, len(moe_routers(model)), e)), axis=2)[:, :, :k].astype(np.uint8)


def _expected_weights(family, router, logits, experts):
    """The family's routing weights of ``experts``, from the paper's formula / the model card, in float64."""
    s = logits.double()
    if family == "deepseek_v3":
        w = torch.sigmoid(s)[experts]
        return w / w.sum() * router.routed_scaling_factor  # norm_topk_prob is True in the tiny config
    p = torch.softmax(s, dim=-1)[experts]
    renorm = getattr(router, "norm_topk_prob", True)  # Qwen3.5 and Mixtral always renormalise
    return p / p.sum() if renorm else p


@pytest.mark.parametrize("family", FAMILIES)
def test_replay_selects_the_recorded_experts_weighted_by_live_logits(family):
    model = build(family)
    ids = _ids()
    record = _foreign_record(model, ids.shape[1] - 1)
    with torch.no_grad():
        live = model(ids).logits
    with replay_routing(model, record), torch.no_grad():
        seen, handles = _router_outputs(model)
        replayed = model(ids).logits
    for h in handles:
        h.remove()
    routers = moe_routers(model)
    for layer, logits, weights, idx in seen:
        np.testing.assert_array_equal(idx[:-1].numpy(), record[:, layer])
        for row in (0, ids.shape[1] // 2, ids.shape[1] - 2):
            expected = _expected_weights(family, routers[layer], logits[row], idx[row])
            torch.testing.assert_close(weights[row].double(), expected, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(replayed, live)  # another sub-network really ran


@pytest.mark.parametrize("family", FAMILIES)
def test_router_weights_get_gradients_under_replay(family):
    model = build(family)
    ids = _ids()
    with capture_routing(model) as rec, torch.no_grad():
        model(ids)
    with replay_routing(model, rec.rows()[:-1]):
        model(ids).logits[0, :-1].logsumexp(-1).sum().backward()
    for r in moe_routers(model):
        assert r.weight.grad is not None and r.weight.grad.abs().sum() > 0


def test_deepseek_correction_bias_changes_the_selection():
    """The bias steers selection, not weights: capture records the biased choice, not the top sigmoid."""
    model = build("deepseek_v3")
    seen, handles = _router_outputs(model)
    with torch.no_grad():
        model(_ids())
    for h in handles:
        h.remove()
    differs = 0
    for _, logits, _, idx in seen:
        by_score = torch.topk(torch.sigmoid(logits), idx.shape[1], dim=-1).indices.sort(-1).values
        differs += int((by_score != idx.sort(-1).values).any(-1).sum())
    assert differs > 0


@pytest.mark.parametrize(("family", "overrides", "moe"), DENSE_CASES)
def test_dense_layers_have_no_column_and_replay_skips_them(family, overrides, moe):
    model = build(family, num_layers=4, **overrides)
    assert moe_layers(model) == moe
    ids = _ids()
    with capture_routing(model) as rec, torch.no_grad():
        live = model(ids).logits
    routing = rec.rows()[:-1]
    assert routing.shape == (ids.shape[1] - 1, len(moe), int(moe_routers(model)[0].top_k))
    with replay_routing(model, routing), torch.no_grad():
        assert torch.equal(model(ids).logits, live)
    # a record with a column per decoder layer (dense ones included) does not fit the model
    wide = np.concatenate([routing, routing[:, :1]], axis=1)
    with pytest.raises(RoutingMismatchError, match="shape"):
        with replay_routing(model, wide):
            pass


@pytest.mark.parametrize(("family", "overrides", "moe"), DENSE_CASES)
def test_sglang_payload_with_zero_dense_layers_decodes_to_the_capture(family, overrides, moe):
    model = build(family, num_layers=4, **overrides)
    ids = _ids()
    with capture_routing(model) as rec, torch.no_grad():
        model(ids)
    routing = rec.rows()[:-1]
    rows, k = routing.shape[0], routing.shape[2]
    wire = np.zeros((rows, 4, k), dtype="<i4")  # SGLang: every decoder layer, dense ones zero-filled
    wire[:, moe] = routing
    payload = base64.b64encode(wire.tobytes()).decode()
    e = int(moe_routers(model)[0].num_experts)
    got = decode_routed_experts(payload, num_layers=4, top_k=k, num_experts=e, moe_layers=moe_layers(model))
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, routing)
    dense = next(i for i in range(4) if i not in moe)
    wire[0, dense, 0] = 1
    with pytest.raises(RoutingMismatchError, match=f"wire layer {dense} is listed as dense"):
        decode_routed_experts(
            base64.b64encode(wire.tobytes()).decode(), num_layers=4, top_k=k, num_experts=e, moe_layers=moe
        )


def test_unregistered_router_family_is_named():
    class FooTopKRouter(nn.Module):
        top_k, num_experts = 2, 4

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Module()])
            self.layers[0].gate = FooTopKRouter()

    with pytest.raises(ValueError, match=r"\['FooTopKRouter'\] have no entry in t1_r3.ROUTER_FAMILIES"):
        moe_routers(Model())
