"""Torch backend on the tiny model of `recipes/tiny-cpu.yaml` (the root conftest's `tiny_model_spec`)."""

import os
import stat

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from t1_spec import PPOSpec
from t1_trainer import logprobs
from t1_trainer.errors import NonFiniteUpdateError
from t1_trainer.step import critic_warmup, ppo_step
from t1_trainer.torch_backend import TorchBackend
from t1_trainer.weights import save_weights

FAST = PPOSpec(
    batch_size=2, actor_lr=1e-4, critic_lr=1e-3
)  # larger steps than the paper's so 3 steps show movement


@pytest.fixture(scope="module")
def sampler(tiny_model_spec):
    from t1_policy import build_model

    return build_model(tiny_model_spec, seed=0)


@pytest.fixture(scope="module")
def batch(sampler, sample_with):
    # two turns with an observation between them; the reward on the last sampled token
    return [
        sample_with(sampler, prompt_len=40, turns=[(12, 20), (12, 0)], reward=r, seed=i, task_id=f"t{i}")
        for i, r in enumerate([0.1, 0.6])
    ]


def _backend(spec, hp=FAST, **kw):
    return TorchBackend(model_spec=spec, ppo_spec=hp, seed=0, **kw)


def test_logprob_gap_with_replay_is_zero_when_actor_equals_sampler(tiny_model_spec, batch):
    be = _backend(tiny_model_spec, logprob_gap_every=1)
    m = ppo_step(be, batch, FAST)
    assert m["samples_aborted_routing"] == 0
    # same weights, same routing, same log-prob definition: only kernel numerics remain (prefill vs decode)
    assert m["actor/logprob_gap_replay"] < 1e-4
    assert "actor/logprob_gap_no_replay" in m
    assert m["actor/loss_tokens"] == sum(int(s.loss_mask.sum()) for s in batch)


def test_step_changes_weights_and_value_loss_falls(tiny_model_spec, batch):
    be = _backend(tiny_model_spec)
    actor0 = {k: v.clone() for k, v in be.export_weights().items()}
    critic0 = be.critic.value_head.weight.detach().clone()
    losses = [ppo_step(be, batch, FAST)["critic/value_loss"] for _ in range(3)]
    assert losses[2] < losses[0]
    after = be.export_weights()
    assert set(after) == set(actor0)
    assert any(not torch.equal(after[k], actor0[k]) for k in actor0)
    assert not torch.equal(be.critic.value_head.weight, critic0)
    # the gap now measures a real policy change: the sampler still holds the old weights
    assert ppo_step(be, batch, FAST)["actor/logprob_gap_replay"] > 1e-4


def test_missing_or_misaligned_routing_aborts_the_sample(tiny_model_spec, batch, Sample):  # noqa: N803
    good = batch[0]
    missing = Sample(**{**vars(batch[1]), "routing": None, "trial_id": "no-record"})
    short = Sample(**{**vars(batch[1]), "routing": batch[1].routing[:-3], "trial_id": "short"})
    wrong_ids = batch[1].routing.copy()
    wrong_ids[5, 1, 0] = 99  # the model has 8 experts
    bad_ids = Sample(**{**vars(batch[1]), "routing": wrong_ids, "trial_id": "bad-ids"})
    be = _backend(tiny_model_spec)
    m = ppo_step(be, [good, missing, short, bad_ids], FAST)
    assert m["samples_aborted_routing"] == 3
    text = " | ".join(m["routing_errors"])
    assert "no-record" in text and "missing" in text
    assert "short" in text and "rows" in text
    assert "bad-ids" in text
    # only the good sample was trained on
    assert m["actor/loss_tokens"] == int(good.loss_mask.sum())


def test_actor_update_aborts_directly_too(tiny_model_spec, batch, Sample):  # noqa: N803
    be = _backend(tiny_model_spec)
    missing = Sample(**{**vars(batch[1]), "routing": None})
    adv = [np.asarray(s.loss_mask, dtype=np.float32) for s in (batch[0], missing)]
    m = be.update_actor([batch[0], missing], adv)
    assert m["samples_aborted_routing"] == 1 and "missing" in m["routing_errors"][0]


def test_no_routing_needed_when_replay_off(tiny_model_spec, batch, Sample):  # noqa: N803
    hp = PPOSpec(batch_size=2, actor_lr=1e-4, critic_lr=1e-3, routing_replay=False)
    be = _backend(tiny_model_spec, hp)
    no_rec = [Sample(**{**vars(s), "routing": None}) for s in batch]
    m = ppo_step(be, no_rec, hp)
    assert m["samples_aborted_routing"] == 0 and m["actor/logprob_gap_no_replay"] < 1e-4
    assert "actor/logprob_gap_replay" not in m


def test_chunked_logprobs_equal_one_shot(tiny_model_spec, batch, monkeypatch):
    from t1_policy import token_logprobs

    be = _backend(tiny_model_spec, PPOSpec(batch_size=2, routing_replay=False))
    s = batch[0]
    monkeypatch.setattr(logprobs, "LOGIT_CHUNK", 5)
    chunked = be.actor_logprobs(s)
    ids = torch.as_tensor(s.token_ids, dtype=torch.long)
    pos = torch.nonzero(torch.as_tensor(s.loss_mask)).flatten()
    with torch.no_grad():
        logits = be.actor(input_ids=ids[None]).logits[0]
    direct = token_logprobs(logits[pos - 1], ids[pos], 1.0, vocab_limit=be.vocab_limit)
    torch.testing.assert_close(chunked.detach(), direct, rtol=0, atol=1e-5)
    chunked.sum().backward()  # the checkpointed chunks backpropagate into the LM head
    assert be.actor.lm_head.weight.grad is not None and be.actor.lm_head.weight.grad.abs().sum() > 0


def test_critic_warmup_leaves_actor_untouched(tiny_model_spec, batch):
    be = _backend(tiny_model_spec)
    actor0 = {k: v.clone() for k, v in be.export_weights().items()}
    out = critic_warmup(be, [batch, batch], FAST)
    assert len(out) == 2 and out[1]["critic/value_loss"] < out[0]["critic/value_loss"]
    assert all(torch.equal(v, actor0[k]) for k, v in be.export_weights().items())


def test_critic_is_a_full_copy_with_value_head(tiny_model_spec):
    be = _backend(tiny_model_spec)
    actor_body = be.actor.model.state_dict()
    critic_body = be.critic.body.state_dict()
    assert set(actor_body) == set(critic_body)
    assert all(torch.equal(actor_body[k], critic_body[k]) for k in actor_body)
    assert be.critic.body is not be.actor.model
    assert tuple(be.critic.value_head.weight.shape) == (1, tiny_model_spec.hidden_size)
    assert not hasattr(be.critic, "lm_head")


def test_save_weights_writes_actor_and_critic(tiny_model_spec, tmp_path):
    be = _backend(tiny_model_spec)
    paths = save_weights(be, tmp_path)
    actor = load_file(paths["actor"])
    critic = load_file(paths["critic"])
    assert torch.equal(actor["lm_head.weight"], be.actor.lm_head.weight.detach())
    assert "value_head.weight" in critic and any(k.startswith("body.") for k in critic)


def test_saved_weights_take_the_umask_not_safetensors_0600(tiny_model_spec, tmp_path):
    previous = os.umask(0o027)
    try:
        paths = save_weights(_backend(tiny_model_spec), tmp_path)
    finally:
        os.umask(previous)
    assert {stat.S_IMODE(p.stat().st_mode) for p in paths.values()} == {0o640}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_step_on_gpu_matches_the_sampler(tiny_model_spec, batch):
    be = _backend(tiny_model_spec, device="cuda")
    m = ppo_step(be, batch, FAST)
    assert m["samples_aborted_routing"] == 0
    # CPU sampler vs GPU trainer: kernels differ, routing is replayed, so only numerics remain
    assert m["actor/logprob_gap_replay"] < 1e-2
    assert all(v.device.type == "cuda" for v in be.export_weights().values())


def test_an_update_that_leaves_weights_non_finite_fails_the_step_naming_the_network(tiny_model_spec, batch):
    # the spec refuses an infinite rate; model_copy skips validation to reach the backend's own guard
    hp = PPOSpec(batch_size=2, actor_lr=1e-4, critic_lr=1e-3).model_copy(update={"critic_lr": float("inf")})
    be = _backend(tiny_model_spec, hp=hp)
    with pytest.raises(NonFiniteUpdateError, match=r"critic: .* inf or NaN .*ppo\.critic_lr"):
        ppo_step(be, batch, hp)


def test_a_non_finite_gradient_is_refused_before_the_step_and_the_weights_are_kept():
    from t1_trainer.optim import clip_and_step

    layer = torch.nn.Linear(3, 2)
    before = layer.weight.detach().clone()
    opt = torch.optim.AdamW(layer.parameters(), lr=1e-3)
    layer(torch.ones(1, 3)).sum().backward()
    layer.weight.grad[0, 0] = float("nan")
    with pytest.raises(NonFiniteUpdateError, match="actor: the gradient norm is nan"):
        clip_and_step(layer, opt, 1.0, "actor")
    assert torch.equal(layer.weight, before) and layer.weight.grad is None


def test_value_head_normal_init_is_openrlhfs_draw(tiny_model_spec):
    be = _backend(tiny_model_spec)
    h = tiny_model_spec.hidden_size
    want = torch.randn(1, h, generator=torch.Generator().manual_seed(0 + 1)) / (
        h + 1
    )  # seed + 1, std 1/(h+1)
    assert torch.equal(be.critic.value_head.weight.detach(), want)


def test_zeros_value_head_starts_every_value_at_zero_and_then_learns(tiny_model_spec, batch):
    hp = FAST.model_copy(update={"value_head_init": "zeros"})
    be = _backend(tiny_model_spec, hp=hp)
    normal = _backend(tiny_model_spec)
    assert all(np.all(v == 0.0) for v in be.values(batch))  # a constant baseline of 0 at the start
    assert max(float(np.abs(v).max()) for v in normal.values(batch)) > 1e-3  # the normal draw scatters
    critic_warmup(be, [batch, batch], hp)
    assert any(float(np.abs(v[1:]).max()) > 0 for v in be.values(batch))  # the head moved off zero


def test_megatron_value_head_is_drawn_by_the_same_function():
    from t1_policy.critic import value_head_weight

    pytest.importorskip("megatron.core")
    from t1_trainer.megatron.model import ValueHead

    for init in ("normal", "zeros"):
        head = ValueHead(16, seed=3, dtype=torch.float32, init=init)
        assert torch.equal(head.weight.detach(), value_head_weight(16, seed=3, init=init))
    with pytest.raises(ValueError, match="value head init 'ones'"):
        value_head_weight(16, seed=3, init="ones")
