"""Megatron-core backend: preflight, and one CPU step of the tiny MoE with megatron's router replay.

The CPU model is the tiny recipe's with ``full_attention_interval: 1`` (every layer full attention); the
recipe's own hybrid model (Gated DeltaNet layers on T1's torch kernels) is tested against the torch backend in
``test_megatron_gdn_cpu.py``. The sampler is the HF policy of the same spec
and seed, so the expected replayed log-prob gap is that of two implementations of one network (float32).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from t1_spec import ModelSpec, PPOSpec, TISSpec, load_recipe
from t1_trainer.megatron.backend import MISSING_LINE, MegatronBackend
from t1_trainer.step import ppo_step

pytest.importorskip("megatron.core", reason="megatron-core (the t1-trainer[megatron] extra) is not installed")

FAST = PPOSpec(batch_size=2, actor_lr=1e-4, critic_lr=1e-3)
TINY_RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "tiny-cpu.yaml"


def _recipe(**trainer):
    r = load_recipe(TINY_RECIPE)
    return r.model_copy(update={"trainer": r.trainer.model_copy(update={"backend": "megatron", **trainer})})


def _full_attention(spec: ModelSpec) -> ModelSpec:
    return ModelSpec(**{**spec.model_dump(), "full_attention_interval": 1})


@pytest.fixture(scope="module")
def spec(tiny_model_spec):
    return _full_attention(tiny_model_spec)


@pytest.fixture(scope="module")
def sampler(spec):
    from t1_policy import build_model

    return build_model(spec, seed=0)


@pytest.fixture(scope="module")
def batch(sampler, sample_with):
    return [
        sample_with(sampler, prompt_len=40, turns=[(12, 20), (12, 0)], reward=r, seed=i, task_id=f"t{i}")
        for i, r in enumerate([0.1, 0.6])
    ]


@pytest.fixture(scope="module")
def stepped(spec, sampler, batch):
    """One backend, its export before any update, and the metrics of one PPO step."""
    plan = load_recipe(TINY_RECIPE).plan
    be = MegatronBackend(
        model_spec=spec, ppo_spec=FAST, plan=plan, seed=0, actor=sampler, logprob_gap_every=1
    )
    before = {k: v.clone() for k, v in be.export_weights().items()}
    metrics = ppo_step(be, batch, FAST)
    return be, before, metrics


def test_preflight_without_the_extra_is_one_clear_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "megatron.core", None)
    assert MegatronBackend.preflight(_recipe()) == [MISSING_LINE]
    assert "t1-trainer[megatron]" in MISSING_LINE and "trainer.backend: torch" in MISSING_LINE


def test_preflight_accepts_gated_deltanet_on_cpu_and_refuses_it_on_cuda_without_fla():
    r = _recipe()
    assert MegatronBackend.preflight(r) == []  # the CPU layer runs T1's torch kernels (megatron.gdn_cpu)
    assert MegatronBackend.preflight(r.model_copy(update={"model": _full_attention(r.model)})) == []
    if importlib.util.find_spec("fla") is None:
        lines = MegatronBackend.preflight(_recipe(device="cuda"))
        gdn = [
            line for line in lines if line.startswith("model.full_attention_interval 4: the 3 Gated DeltaNet")
        ]
        assert len(gdn) == 1 and "flash-linear-attention (fla) on CUDA" in gdn[0], lines


def test_preflight_refuses_unbuilt_degrees_by_name():
    r = _recipe()
    plan = r.plan.model_copy(update={"tp": 2, "pp": 2, "devices": 4})
    lines = MegatronBackend.preflight(r.model_copy(update={"model": _full_attention(r.model), "plan": plan}))
    # tp 2 and pp 2 are built on the CPU (test_megatron_parallel); this process is no 4-rank launch
    assert [line.split(" ")[0] for line in lines] == ["plan:"]
    assert "torchrun --nproc-per-node 4" in lines[0]
    plan = r.plan.model_copy(update={"cp": 2, "etp": 2, "ep": 2, "devices": 2})
    lines = MegatronBackend.preflight(r.model_copy(update={"model": _full_attention(r.model), "plan": plan}))
    # cp 2 and etp 2 are built on the CPU (test_megatron_parallel); this process is no 2-rank launch
    assert [line.split(" ")[0] for line in lines] == ["plan:"]
    plan = r.plan.model_copy(update={"dp": 2, "ep": 2, "devices": 2})  # built; this is no 2-rank launch
    lines = MegatronBackend.preflight(r.model_copy(update={"model": _full_attention(r.model), "plan": plan}))
    assert [line.split(" ")[0] for line in lines] == ["plan:"]


def test_preflight_refuses_a_vocabulary_tp_does_not_divide():
    r = _recipe()
    plan = r.plan.model_copy(update={"tp": 2, "devices": 2})
    model = _full_attention(r.model).model_copy(update={"vocab_size": 248_321})
    lines = MegatronBackend.preflight(r.model_copy(update={"model": model, "plan": plan}))
    assert lines[0].startswith("model.vocab_size 248321: megatron's VocabParallelEmbedding"), lines


def test_preflight_refuses_tensor_parallel_on_cuda():
    r = _recipe(device="cuda")
    plan = r.plan.model_copy(update={"tp": 2, "devices": 2})
    lines = MegatronBackend.preflight(r.model_copy(update={"model": _full_attention(r.model), "plan": plan}))
    assert any(line.startswith("plan.tp 2 on trainer.device cuda") for line in lines), lines


def test_preflight_refuses_context_and_expert_tensor_parallel_on_cuda():
    r = _recipe(device="cuda")
    plan = r.plan.model_copy(update={"cp": 2, "devices": 2})
    lines = MegatronBackend.preflight(r.model_copy(update={"model": _full_attention(r.model), "plan": plan}))
    assert any(
        line.startswith("plan.cp 2 on trainer.device cuda") and "Transformer Engine" in line for line in lines
    ), lines
    plan = r.plan.model_copy(update={"tp": 2, "etp": 2, "devices": 2})
    lines = MegatronBackend.preflight(r.model_copy(update={"model": _full_attention(r.model), "plan": plan}))
    assert any(line.startswith("plan.etp 2 on trainer.device cuda") for line in lines), lines


def test_preflight_refuses_pipeline_stages_on_cuda_and_with_tied_embeddings():
    r = _recipe(device="cuda")
    plan = r.plan.model_copy(update={"pp": 2, "devices": 2})
    lines = MegatronBackend.preflight(r.model_copy(update={"model": _full_attention(r.model), "plan": plan}))
    assert any(line.startswith("plan.pp 2 on trainer.device cuda") for line in lines), lines
    r = _recipe()
    tied = _full_attention(r.model).model_copy(update={"tie_word_embeddings": True})
    lines = MegatronBackend.preflight(r.model_copy(update={"model": tied, "plan": plan}))
    assert [line.split(" ")[0] for line in lines] == ["plan.pp", "plan:"]
    assert "tie_word_embeddings" in lines[0] and "first and last pipeline stages" in lines[0]


def test_cpu_schedule_patches_only_while_it_runs():
    from t1_trainer.megatron.pipeline import cpu_schedule

    sync, current = torch.cuda.synchronize, torch.cuda.current_device
    with cpu_schedule(True):
        # megatron's schedule: a token counter on "cuda", buffers on current_device(), a synchronize
        assert torch.zeros([], dtype=torch.int, device="cuda").device.type == "cpu"
        assert torch.empty((3,), device=torch.cuda.current_device()).device.type == "cpu"
        torch.cuda.synchronize()
    assert torch.cuda.synchronize is sync and torch.cuda.current_device is current
    with cpu_schedule(False):  # CUDA: megatron's path untouched
        assert torch.cuda.synchronize is sync and torch.cuda.current_device is current


def test_preflight_names_the_megatron_backend_for_the_ppo_settings_it_does_not_build():
    r = _recipe()
    ppo = r.ppo.model_copy(update={"normalize_advantages": True, "micro_batch_size": 2})
    lines = MegatronBackend.preflight(r.model_copy(update={"model": _full_attention(r.model), "ppo": ppo}))
    assert [line.split(" ")[0].rstrip(":") for line in lines] == [
        "ppo.normalize_advantages",
        "ppo.micro_batch_size",
    ]
    assert all("megatron" in line and "torch" not in line for line in lines), lines


def test_actor_and_critic_have_the_hf_policy_shapes(stepped, sampler, spec):
    be, before, _ = stepped
    hf = sampler.state_dict()
    assert set(before) == set(hf)  # export_weights uses the HF names, every one of them
    assert all(before[k].shape == hf[k].shape for k in hf)
    n_hf = sum(p.numel() for p in sampler.parameters())
    assert sum(p.numel() for p in be.actor.parameters()) == n_hf
    # the critic: the LM head [V, H] replaced by a value head [1, H]
    h = spec.hidden_size
    assert sum(p.numel() for p in be.critic.parameters()) == n_hf - spec.vocab_size * h + h


def test_export_before_any_update_round_trips_the_sampler_weights(stepped, sampler):
    _, before, _ = stepped
    hf = sampler.state_dict()
    assert all(torch.equal(before[k], hf[k]) for k in hf)


def test_one_cpu_step_has_the_torch_backends_metrics_all_finite(stepped, spec, batch):
    from t1_trainer.torch_backend import TorchBackend

    _, _, m = stepped
    torch_m = ppo_step(TorchBackend(model_spec=spec, ppo_spec=FAST, seed=0, logprob_gap_every=1), batch, FAST)
    assert set(m) == set(torch_m)
    assert m["samples_aborted_routing"] == 0 and m["routing_errors"] == []
    for k, v in m.items():
        if isinstance(v, float) and not k.startswith("critic/ev_"):
            assert np.isfinite(v), k


def test_replayed_logprobs_match_the_hf_sampler(stepped):
    # same weights and routing, two implementations of one network: float32 rounding only
    _, _, m = stepped
    assert m["actor/logprob_gap_replay"] < 1e-4
    assert m["actor/ratio_mean"] == pytest.approx(1.0)


def test_the_router_takes_the_fed_experts(stepped, batch):
    be, _, _ = stepped
    s = batch[0]
    live, live_rows = be.live_routing(s)
    e = be.model_spec.num_experts
    forced = (np.asarray(live_rows[:-1]) + 1) % e  # every record row moved to other experts
    fed = dataclasses.replace(s, routing=forced.astype(np.int32))
    picked: list[torch.Tensor] = []
    hooks = [
        m.register_forward_hook(lambda _m, _i, out: picked.append(out[1].detach()))  # routing_map [T, E]
        for name, m in be.actor.named_modules()
        if name.endswith("mlp.router")
    ]
    try:
        with torch.no_grad(), be.replayed(fed):
            replayed = be.actor_logprobs(fed)
    finally:
        for h in hooks:
            h.remove()
    assert len(picked) == be.model_spec.num_layers
    for layer, routing_map in enumerate(picked):
        chosen = np.sort(np.nonzero(routing_map.numpy())[1].reshape(-1, be.model_spec.top_k), axis=1)
        assert np.array_equal(chosen[:-1], np.sort(forced[:, layer], axis=1))
    assert float((replayed - live).abs().max()) > 1e-4  # other experts, other log-probs


def test_a_missing_record_fails_closed(stepped, batch):
    be, _, _ = stepped
    s = batch[0]
    gone = dataclasses.replace(s, routing=None)
    errors = be.routing_errors([gone, batch[1]])
    assert list(errors) == [0] and "routing record missing" in errors[0]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_step_on_gpu_with_the_distributed_optimizer(spec, sampler, batch):
    plan = load_recipe(TINY_RECIPE).plan
    be = MegatronBackend(model_spec=spec, ppo_spec=FAST, plan=plan, seed=0, actor=sampler, device="cuda")
    m = ppo_step(be, batch, FAST)
    assert m["samples_aborted_routing"] == 0
    assert m["actor/logprob_gap_replay"] < 1e-2


def test_the_importance_correction_runs_in_the_megatron_backend_too(spec, sampler, batch):
    # the shared update loop applies it; the preflight no longer refuses it for this backend
    hp = FAST.model_copy(update={"off_policy": TISSpec(cap=1.05)})
    r = _recipe()
    r = r.model_copy(update={"model": _full_attention(r.model), "ppo": hp})
    assert MegatronBackend.preflight(r) == []
    # rollout log-probs 0.1 nats below the trainer's own: every loss token's ratio is e^0.1 = 1.105 > 1.05
    shifted = [
        dataclasses.replace(
            s, rollout_logprobs=np.where(s.loss_mask == 1, s.rollout_logprobs - 0.1, 0.0).astype(np.float32)
        )
        for s in batch
    ]
    plan = load_recipe(TINY_RECIPE).plan
    be = MegatronBackend(model_spec=spec, ppo_spec=hp, plan=plan, seed=0, actor=sampler)
    m = ppo_step(be, shifted, hp)
    assert m["actor/off_policy_truncated_fraction"] == 1.0
    assert m["actor/off_policy_weight_mean"] == pytest.approx(1.05)


def test_preflight_refuses_gated_deltanet_heads_that_tp_times_cp_does_not_divide():
    # megatron-core's TransformerConfig asserts both linear head counts divide tp * cp, even though T1's
    # sequence-sharded scan splits no heads over cp: the tiny hybrid model's 2 key heads do not split 4 ways
    r = _recipe()
    plan = r.plan.model_copy(update={"tp": 2, "cp": 2, "devices": 4})
    lines = MegatronBackend.preflight(r.model_copy(update={"plan": plan}))
    assert [line.split(" ")[0] for line in lines] == ["model.linear_num_key_heads", "plan:"], lines
    assert "plan.tp 2 x plan.cp 2 = 4" in lines[0]
    plan = r.plan.model_copy(update={"cp": 2, "devices": 2})  # 2 and 4 heads split 2 ways: built
    lines = MegatronBackend.preflight(r.model_copy(update={"plan": plan}))
    assert [line.split(" ")[0] for line in lines] == ["plan:"], lines
