"""Packed micro-batches: a packed forward and backward equal the samples' own, on the tiny model with R3.

The reference is always the unpacked path (one sample per forward, the trainer's path with
``micro_batch_size`` 1), never the packing code itself. Whole PPO steps packed against unpacked are in
``test_packing_step.py`` (out of the unit tier: they train the tiny model four times).
"""

import numpy as np
import pytest
import torch

from t1_r3 import RoutingMismatchError, replay_routing, replay_routing_packed
from t1_spec import PPOSpec
from t1_trainer.packing import PackedSamples, forward_scope, micro_batches, plan_micro_batches
from t1_trainer.torch_backend import TorchBackend

FAST = PPOSpec(batch_size=5, actor_lr=1e-4, critic_lr=1e-3, ppo_epochs=2)
PACKED = FAST.model_copy(update={"micro_batch_size": 5})


@pytest.fixture(scope="module")
def sampler(tiny_model_spec):
    from t1_policy import build_model

    # another seed than the trained actor's: the recorded experts differ from the actor's live choice, so a
    # record replayed on the wrong tokens shows in the log-probs
    return build_model(tiny_model_spec, seed=1)


@pytest.fixture(scope="module")
def batch(sampler, sample_with):
    # different lengths, one past the Gated DeltaNet's 64-token scan chunk, one of a few tokens
    shapes = [(30, [(6, 10), (5, 0)]), (70, [(8, 0)]), (3, [(2, 0)]), (20, [(4, 6), (4, 0)]), (50, [(9, 0)])]
    return [
        sample_with(sampler, prompt_len=p, turns=t, reward=0.2 * i, seed=10 + i, task_id=f"t{i}")
        for i, (p, t) in enumerate(shapes)
    ]


def _backend(spec, ppo=FAST):
    return TorchBackend(model_spec=spec, ppo_spec=ppo, seed=0)


def _actor_grads(be):
    return {n: p.grad.detach().clone() for n, p in be.actor.named_parameters() if p.grad is not None}


def test_plan_keeps_order_and_respects_both_caps():
    assert plan_micro_batches([5, 5, 5, 5, 5], max_samples=2) == [[0, 1], [2, 3], [4]]
    assert plan_micro_batches([5, 5, 5], max_samples=1) == [[0], [1], [2]]
    # a budget of 12 tokens: 5 + 5, then 30 alone (longer than the budget), then 4 + 8
    assert plan_micro_batches([5, 5, 30, 4, 8], max_samples=8, max_tokens=12) == [[0, 1], [2], [3, 4]]
    assert plan_micro_batches([], max_samples=4) == []
    with pytest.raises(ValueError, match="max_samples 0"):
        plan_micro_batches([3], max_samples=0)


def test_defaults_keep_one_sample_per_micro_batch(batch):
    mbs = micro_batches(batch, range(len(batch)), FAST)
    assert [mb.indices for mb in mbs] == [(i,) for i in range(len(batch))]
    assert all(mb.unit is batch[i] for i, mb in enumerate(mbs))


def test_varlen_hidden_states_equal_each_sequence_alone(sampler):
    from t1_policy.varlen import varlen_forward

    g = torch.Generator().manual_seed(0)
    lengths = [37, 100, 5, 70]
    seqs = [torch.randint(0, 5000, (n,), generator=g) for n in lengths]
    with torch.no_grad():
        alone = [sampler.model(input_ids=s[None], use_cache=False).last_hidden_state[0] for s in seqs]
        row = torch.cat(seqs)[None]
        crossed = torch.split(sampler.model(input_ids=row, use_cache=False).last_hidden_state[0], lengths)
        with varlen_forward(sampler.model, lengths):
            packed = torch.split(sampler.model(input_ids=row, use_cache=False).last_hidden_state[0], lengths)
    for a, p, c, n in zip(alone, packed, crossed, lengths, strict=True):
        torch.testing.assert_close(p, a, atol=1e-5, rtol=1e-5)
        if n != lengths[0]:  # without the packed forward, every later sequence sees the earlier ones
            assert float((c - a).abs().max()) > 1e-2


def test_varlen_refuses_positions_of_its_own(sampler):
    from t1_policy.varlen import varlen_forward

    with varlen_forward(sampler.model, [3, 4]), pytest.raises(ValueError, match="got position_ids"):
        sampler.model(input_ids=torch.zeros(1, 7, dtype=torch.long), position_ids=torch.zeros(1, 7))
    with varlen_forward(sampler.model, [3, 4]), pytest.raises(ValueError, match="at most 7 tokens"):
        sampler.model(input_ids=torch.zeros(1, 8, dtype=torch.long), use_cache=False)


def test_packed_replay_equals_each_sample_replayed_alone(sampler, batch):
    from t1_policy.varlen import varlen_forward

    records = [np.asarray(s.routing) for s in batch]
    with torch.no_grad():
        alone = []
        for s, rec in zip(batch, records, strict=True):
            with replay_routing(sampler, rec):
                alone.append(
                    sampler.model(input_ids=torch.as_tensor(s.token_ids[None]).long()).last_hidden_state
                )
        lengths = [len(s.token_ids) for s in batch]
        row = torch.as_tensor(np.concatenate([s.token_ids for s in batch])[None]).long()
        with varlen_forward(sampler.model, lengths), replay_routing_packed(sampler, records):
            packed = sampler.model(input_ids=row, use_cache=False).last_hidden_state
    for a, p in zip(alone, torch.split(packed, lengths, dim=1), strict=True):
        torch.testing.assert_close(p, a, atol=1e-5, rtol=1e-5)
    with (
        replay_routing_packed(sampler, records),
        pytest.raises(RoutingMismatchError, match="packed records cover"),
    ):
        sampler.model(input_ids=row[:, :-1])


def test_packed_logprobs_and_gradients_equal_unpacked_with_replay(tiny_model_spec, batch):
    be = _backend(tiny_model_spec, PACKED)
    weights = [torch.linspace(-1.0, 1.0, int(np.count_nonzero(s.loss_mask))) for s in batch]

    be.actor.zero_grad(set_to_none=True)
    alone = []
    for s, w in zip(batch, weights, strict=True):
        with forward_scope(be, "actor", s, replay=True):
            logp = be.actor_logprobs(s)
            (logp * w).sum().backward()
        alone.append(logp.detach())
    grads_alone = _actor_grads(be)

    be.actor.zero_grad(set_to_none=True)
    pack = PackedSamples(batch)
    with forward_scope(be, "actor", pack, replay=True):
        logp = be.actor_logprobs(pack)
        (logp * torch.cat(weights)).sum().backward()
    grads_packed = _actor_grads(be)
    with torch.no_grad(), forward_scope(be, "actor", pack, replay=False):
        live = be.actor_logprobs(pack)

    for a, p in zip(alone, pack.split_loss_tokens(logp.detach()), strict=True):
        torch.testing.assert_close(p, a, atol=1e-5, rtol=1e-5)
    assert float((live - logp.detach()).abs().max()) > 1e-3  # replay is on: the sampler routed otherwise
    assert set(grads_packed) == set(grads_alone)
    for name, g in grads_alone.items():
        torch.testing.assert_close(grads_packed[name], g, atol=1e-6, rtol=1e-4, msg=name)


def test_packed_values_and_gradients_equal_unpacked(tiny_model_spec, batch):
    be = _backend(tiny_model_spec, PACKED)
    weights = [torch.linspace(1.0, 2.0, len(s.token_ids)) for s in batch]

    be.critic.zero_grad(set_to_none=True)
    alone = []
    for s, w in zip(batch, weights, strict=True):
        v = be.critic_values(s)
        (v * w).sum().backward()
        alone.append(v.detach())
    grads_alone = {n: p.grad.clone() for n, p in be.critic.named_parameters() if p.grad is not None}

    be.critic.zero_grad(set_to_none=True)
    (mb,) = micro_batches(batch, range(len(batch)), PACKED)
    with forward_scope(be, "critic", mb.unit, replay=False):
        v = mb.values(be.critic_values(mb.unit))
        (v * torch.cat(weights)).sum().backward()
    grads_packed = {n: p.grad.clone() for n, p in be.critic.named_parameters() if p.grad is not None}

    for a, p in zip(alone, mb.split_tokens(v.detach()), strict=True):
        assert float(p[0]) == 0.0
        torch.testing.assert_close(p, a, atol=1e-5, rtol=1e-5)
    got = be.values(batch)  # the no-grad values of the step, packed as the update
    for a, p in zip(alone, got, strict=True):
        np.testing.assert_allclose(p, a.numpy(), atol=1e-5, rtol=1e-5)
    assert set(grads_packed) == set(grads_alone)
    for name, g in grads_alone.items():
        torch.testing.assert_close(grads_packed[name], g, atol=1e-6, rtol=1e-4, msg=name)
