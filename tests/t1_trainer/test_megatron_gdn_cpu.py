"""Megatron-core's Gated DeltaNet on the CPU (`t1_trainer.megatron.gdn_cpu`): its torch kernels against the
gated delta rule and the causal convolution computed token by token, and one CPU step of the tiny hybrid
model (`recipes/tiny-cpu.yaml`: 3 Gated DeltaNet layers, 1 full attention) against the torch backend.

The torch backend runs transformers' Qwen3.5 model; the megatron backend runs megatron's ``GPTModel`` with
megatron's ``GatedDeltaNet``. Same weights (the name map), same records (R3): the replayed log-probs, the
gradient of their sum, one PPO step's metrics and the weights after it agree to float32 rounding.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from t1_spec import PPOSpec, load_recipe
from t1_trainer.megatron.gdn_cpu import torch_causal_conv1d, torch_gated_delta_rule, torch_l2norm

FAST = PPOSpec(batch_size=2, actor_lr=1e-4, critic_lr=1e-3)
TINY_RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "tiny-cpu.yaml"
LOGP_ATOL = 2e-5
"""float32: two implementations of one network (measured 9.5e-7)."""
GRAD_RTOL = 1e-4
"""Of the largest gradient entry of a tensor (float32 sums in another order). Measured 3.2e-5, on a Gated
DeltaNet layer's ``A_log`` and ``dt_bias`` (sums over tokens and heads that largely cancel); one layer alone
gives those two bit-identical and the rest within 4e-7 (test_one_gated_deltanet_layer_is_transformers_own)."""
WEIGHT_ATOL = 0.02 * FAST.actor_lr
"""2% of one Adam step. Adam's first step moves an entry by ``lr * g / (|g| + eps)``, so a gradient entry near
zero turns an absolute rounding difference ``d`` into up to ``lr * d / eps`` (1e4 d here): two implementations
whose gradients differ by 1e-10 on such an entry differ by 1% of a step (measured 1.3e-6 on the hybrid model,
6.0e-7 on the full-attention one; the parallel tests compare megatron with itself and hold 1%)."""


def _recurrence(q, k, v, g, beta):
    """The gated delta rule token by token in float64: ``[tokens, heads, d]`` -> ``[tokens, heads, dv]``."""
    q, k, v, g, beta = (t.double() for t in (q, k, v, g, beta))
    tokens, heads, dk = k.shape
    state = torch.zeros(heads, dk, v.shape[-1], dtype=torch.float64)
    out = []
    for t in range(tokens):
        state = state * g[t].exp()[:, None, None]
        err = v[t] - torch.einsum("hk,hkv->hv", k[t], state)
        state = state + beta[t][:, None, None] * torch.einsum("hk,hv->hkv", k[t], err)
        out.append(torch.einsum("hk,hkv->hv", q[t] / math.sqrt(dk), state))
    return torch.stack(out)


def _inputs(tokens: int, heads: int = 2, dk: int = 8, dv: int = 4, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    q = torch_l2norm(torch.randn(1, tokens, heads, dk, generator=gen))
    k = torch_l2norm(torch.randn(1, tokens, heads, dk, generator=gen))
    v = torch.randn(1, tokens, heads, dv, generator=gen)
    g = -F.softplus(torch.randn(1, tokens, heads, generator=gen))
    beta = torch.rand(1, tokens, heads, generator=gen)
    return q, k, v, g, beta


def test_torch_gated_delta_rule_is_the_recurrence_token_by_token():
    q, k, v, g, beta = _inputs(150)  # three chunks of 64, the last one partial
    out, state = torch_gated_delta_rule(q, k, v, g, beta)
    assert state is None and out.shape == v.shape and out.dtype == torch.float32
    ref = _recurrence(q[0], k[0], v[0], g[0], beta[0])
    assert float((out[0].double() - ref).abs().max()) < 1e-5


def test_torch_gated_delta_rule_restarts_the_state_at_every_packed_sequence():
    q, k, v, g, beta = _inputs(100, seed=1)
    cu = torch.tensor([0, 37, 100])
    out, _ = torch_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu)
    for a, b in ((0, 37), (37, 100)):
        ref = _recurrence(q[0, a:b], k[0, a:b], v[0, a:b], g[0, a:b], beta[0, a:b])
        assert float((out[0, a:b].double() - ref).abs().max()) < 1e-5
    with pytest.raises(NotImplementedError, match="carried recurrent"):
        torch_gated_delta_rule(q, k, v, g, beta, output_final_state=True)
    with pytest.raises(ValueError, match="cu_seqlens"):
        torch_gated_delta_rule(q, k, v, g, beta, cu_seqlens=torch.tensor([0, 99]))


def test_torch_causal_conv1d_is_the_causal_convolution_per_sequence():
    gen = torch.Generator().manual_seed(2)
    x, w, b = (
        torch.randn(1, 30, 6, generator=gen),
        torch.randn(6, 4, generator=gen),
        torch.randn(6, generator=gen),
    )
    y, state = torch_causal_conv1d(x, w, b, activation="silu", cu_seqlens=torch.tensor([0, 11, 30]))
    assert state is None and y.shape == x.shape
    ref = torch.zeros(30, 6, dtype=torch.float64)
    for a, e in ((0, 11), (11, 30)):
        for t in range(a, e):
            for j in range(4):  # tap j reads token t - 3 + j, zero before the sequence starts
                if t - 3 + j >= a:
                    ref[t] += w[:, j].double() * x[0, t - 3 + j].double()
    ref = F.silu(ref + b.double())
    assert float((y[0].double() - ref).abs().max()) < 1e-5


def _hybrid_spec():
    spec = load_recipe(TINY_RECIPE).model
    assert spec.num_linear_attention_layers == 3  # the recipe's own model: hybrid, as Qwen3.5
    return spec


def _one_layer(hf_layer, mg_layer) -> dict:
    """Transformers' and megatron's Gated DeltaNet on one input: outputs, input and parameter gradients."""
    x = torch.randn(1, 85, hf_layer.hidden_size, generator=torch.Generator().manual_seed(3))
    w = torch.randn(1, 85, hf_layer.hidden_size, generator=torch.Generator().manual_seed(4))
    x_hf, x_mg = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    y_hf = hf_layer(x_hf)
    from t1_trainer.megatron.model import cpu_device_shim

    with cpu_device_shim(True):
        y_mg, _ = mg_layer(x_mg.transpose(0, 1), None)
    y_mg = y_mg.transpose(0, 1)
    (y_hf * w).sum().backward()
    (y_mg * w).sum().backward()
    hf_p, mg_p = dict(hf_layer.named_parameters()), dict(mg_layer.named_parameters())
    pairs = {
        "A_log": "A_log",
        "dt_bias": "dt_bias",
        "norm.weight": "out_norm.weight",
        "conv1d.weight": "conv1d.weight",
    }
    out = {"equal": torch.equal(y_hf, y_mg), "moved": float(y_hf.abs().max())}
    out["grads"] = {a: (hf_p[a].grad.clone(), mg_p[m].grad.clone()) for a, m in pairs.items()}
    out["grads"]["hidden"] = (x_hf.grad, x_mg.grad)
    for p in (*hf_p.values(), *mg_p.values()):
        p.grad = None
    return out


@pytest.fixture(scope="module")
def both(sample_with):
    """The megatron and torch backends of the tiny hybrid model, their replayed log-probs and gradients."""
    pytest.importorskip(
        "megatron.core", reason="megatron-core (the t1-trainer[megatron] extra) is not installed"
    )
    from t1_policy import build_model
    from t1_trainer.megatron.backend import MegatronBackend
    from t1_trainer.megatron.names import megatron_to_hf
    from t1_trainer.step import ppo_step
    from t1_trainer.torch_backend import TorchBackend

    torch.set_num_threads(1)
    spec = _hybrid_spec()
    sampler = build_model(spec, seed=0)
    batch = [
        sample_with(sampler, prompt_len=40 + i, turns=[(12, 20), (12, 0)], reward=r, seed=i, task_id=f"t{i}")
        for i, r in enumerate([0.1, 0.6])
    ]
    plan = load_recipe(TINY_RECIPE).plan
    mg = MegatronBackend(
        model_spec=spec, ppo_spec=FAST, plan=plan, seed=0, actor=sampler, logprob_gap_every=1
    )
    tb = TorchBackend(
        model_spec=spec, ppo_spec=FAST, seed=0, actor=build_model(spec, seed=0), logprob_gap_every=1
    )
    out = {"initial": {k: v.clone() for k, v in mg.export_weights().items()}, "hf": sampler.state_dict()}
    out["layers"] = [
        _one_layer(sampler.model.layers[i].linear_attn, mg.actor.decoder.layers[i].self_attention)
        for i, kind in enumerate(spec.layer_types)
        if kind == "linear_attention"
    ]
    for name, be in (("megatron", mg), ("torch", tb)):
        be.zero_grad("actor")
        logps = []
        with be.running("actor"):
            for s in batch:
                with be.replayed(s):
                    lp = be.actor_logprobs(s)
                    be.backward(lp.sum(), "actor")
                logps.append(lp.detach())
        grads = {
            n: (p.grad if p.grad is not None else torch.zeros_like(p)) for n, p in be.actor.named_parameters()
        }
        if name == "megatron":
            grads = megatron_to_hf(
                {k: v.detach() for k, v in grads.items()}, mg.hf_config, layer_spec="local"
            )
        out[name] = {"logps": logps, "grads": {k: v.detach().clone() for k, v in grads.items()}}
        be.zero_grad("actor")
        out[name]["metrics"] = ppo_step(be, batch, FAST)
        out[name]["weights"] = be.export_weights()
    return out


def _max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


def test_preflight_accepts_the_hybrid_model_on_cpu_with_tp():
    pytest.importorskip(
        "megatron.core", reason="megatron-core (the t1-trainer[megatron] extra) is not installed"
    )
    from t1_trainer.megatron.backend import MegatronBackend

    r = load_recipe(TINY_RECIPE)
    r = r.model_copy(update={"trainer": r.trainer.model_copy(update={"backend": "megatron"})})
    assert MegatronBackend.preflight(r) == []
    plan = r.plan.model_copy(update={"tp": 2, "devices": 2})
    lines = MegatronBackend.preflight(r.model_copy(update={"plan": plan}))
    # built (test_megatron_parallel's tp2gdn); this process is no 2-rank launch
    assert [line.split(" ")[0] for line in lines] == ["plan:"], lines


def test_the_name_map_covers_the_gated_deltanet_weights(both):
    hf = both["hf"]
    assert set(both["initial"]) == set(hf)
    assert any(".linear_attn.in_proj_qkv." in k for k in hf) and any(".linear_attn.A_log" in k for k in hf)
    assert all(torch.equal(both["initial"][k], hf[k]) for k in hf)


def test_one_gated_deltanet_layer_is_transformers_own(both):
    # megatron's layer on T1's torch kernels against the torch backend's (transformers') layer, same weights
    assert len(both["layers"]) == 3
    for layer in both["layers"]:
        assert layer["equal"] and layer["moved"] > 0  # the forward: bit-identical
        for name, (hf, mg) in layer["grads"].items():
            rel = _max_abs(hf, mg) / float(hf.abs().max())
            # A_log, dt_bias, the norm: identical; the fused in_proj sums its backward in another order
            assert rel <= (0.0 if name in ("A_log", "dt_bias", "norm.weight") else 1e-6), (name, rel)


def test_replayed_logprobs_and_their_gradients_match_the_torch_backend(both):
    mg, tb = both["megatron"], both["torch"]
    worst = max(_max_abs(a, b) for a, b in zip(mg["logps"], tb["logps"], strict=True))
    print(f"replayed log-probs max |megatron - torch| = {worst:.3g}")
    assert worst <= LOGP_ATOL
    assert set(mg["grads"]) == set(tb["grads"])
    rel = {
        k: _max_abs(mg["grads"][k], tb["grads"][k]) / max(float(tb["grads"][k].abs().max()), 1e-30)
        for k in tb["grads"]
    }
    key = max(rel, key=rel.get)
    print(f"gradients max relative difference {rel[key]:.3g} ({key})")
    assert rel[key] <= GRAD_RTOL
    gdn = [k for k in tb["grads"] if ".linear_attn." in k]
    assert gdn and all(float(tb["grads"][k].abs().max()) > 0 for k in gdn)  # the GDN layers were trained


def test_one_ppo_step_matches_the_torch_backend(both):
    mg, tb = both["megatron"], both["torch"]
    assert set(mg["metrics"]) == set(tb["metrics"])
    assert mg["metrics"]["samples_aborted_routing"] == 0
    for k, v in tb["metrics"].items():
        if not isinstance(v, float) or k.endswith("time_s"):
            continue
        assert mg["metrics"][k] == pytest.approx(v, rel=1e-4, abs=1e-6, nan_ok=True), k
    assert np.isfinite(mg["metrics"]["actor/logprob_gap_replay"])
    assert mg["metrics"]["actor/logprob_gap_replay"] < 1e-4
    wdiff = max(_max_abs(mg["weights"][k], tb["weights"][k]) for k in tb["weights"])
    print(f"weights after one PPO step max |megatron - torch| = {wdiff:.3g}")
    assert wdiff <= WEIGHT_ATOL
    moved = max(_max_abs(tb["weights"][k], both["hf"][k]) for k in tb["weights"])
    assert moved > 10 * WEIGHT_ATOL


def test_megatron_kernels_are_swapped_only_while_the_layer_runs(both):
    # after building and running the layers, megatron's modules are as imported (no fla here: None)
    from megatron.core.ssm.gated_delta_net import common, gdn

    if importlib.util.find_spec("fla") is None:
        assert common.HAVE_FLA is False and common.l2norm is None and gdn.causal_conv1d is None
        assert gdn.chunk_gated_delta_rule is None
