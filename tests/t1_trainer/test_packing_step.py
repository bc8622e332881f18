"""A whole PPO step with packed micro-batches gives the unpacked step's weights, on one process and on a
data-parallel backend (the tiny model, R3 replay on, samples of different lengths).

The per-forward equalities (log-probs, values, gradients) are in ``test_packing.py``.
"""

import socket

import pytest

from t1_spec import PPOSpec
from t1_trainer.packing import plan_micro_batches
from t1_trainer.step import ppo_step
from t1_trainer.torch_backend import TorchBackend

FAST = PPOSpec(batch_size=5, actor_lr=1e-4, critic_lr=1e-3, ppo_epochs=2)
PACKED = FAST.model_copy(update={"micro_batch_size": 5})
BUDGET = FAST.model_copy(update={"micro_batch_size": 5, "micro_batch_tokens": 160})


@pytest.fixture(scope="module")
def batch(tiny_model_spec, sample_with):
    from t1_policy import build_model

    # a sampler of another seed than the actor: replayed experts differ from the actor's live choice
    sampler = build_model(tiny_model_spec, seed=1)
    shapes = [(30, [(6, 10), (5, 0)]), (70, [(8, 0)]), (3, [(2, 0)]), (20, [(4, 6), (4, 0)]), (50, [(9, 0)])]
    return [
        sample_with(sampler, prompt_len=p, turns=t, reward=0.2 * i, seed=10 + i, task_id=f"t{i}")
        for i, (p, t) in enumerate(shapes)
    ]


def _backend(spec, ppo=FAST):
    return TorchBackend(model_spec=spec, ppo_spec=ppo, seed=0)


@pytest.mark.parametrize("packed", [PACKED, BUDGET], ids=["five-in-one", "token-budget"])
def test_ppo_step_packed_gives_the_unpacked_weights(tiny_model_spec, batch, packed):
    one, many = _backend(tiny_model_spec, FAST), _backend(tiny_model_spec, packed)
    m_one, m_many = ppo_step(one, batch, FAST), ppo_step(many, batch, packed)
    if packed is BUDGET:
        lengths = [len(s.token_ids) for s in batch]
        assert 1 < len(plan_micro_batches(lengths, max_samples=5, max_tokens=160)) < len(batch)
    # Adam divides by sqrt(v), so a gradient's rounding difference can move a weight by a share of one
    # step lr; measured: 0.6% of a step (actor), 0.4% (critic), the median weight agreeing to 1e-8
    for net, lr in (("actor", FAST.actor_lr), ("critic", FAST.critic_lr)):
        a = dict(getattr(one, net).named_parameters())
        b = dict(getattr(many, net).named_parameters())
        diffs = {n: float((a[n] - b[n]).detach().abs().max()) for n in a}
        assert max(diffs.values()) < 0.02 * lr, (
            net,
            max(diffs.items(), key=lambda kv: kv[1]),
        )
    for key in (
        "critic/value_loss",
        "actor/policy_loss",
        "actor/policy_loss_first",
        "actor/logprob_gap_replay",
    ):
        assert m_many[key] == pytest.approx(m_one[key], rel=1e-4, abs=1e-6), key
    assert m_many["actor/loss_tokens"] == m_one["actor/loss_tokens"]


def test_data_parallel_backend_packs_through_its_ddp_wrappers(tiny_model_spec, batch):
    # one gloo rank: the DDP-wrapped hooks of t1_trainer.data_parallel see the pack where they saw a sample
    from t1_trainer.data_parallel import DataParallelTorchBackend, data_parallel_ppo_step
    from t1_trainer.distributed import RankGroup

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    group = RankGroup(rank=0, world_size=1, address="127.0.0.1", port=port, timeout_s=120.0).join()
    try:
        dp = DataParallelTorchBackend(group, model_spec=tiny_model_spec, ppo_spec=PACKED, seed=0)
        data_parallel_ppo_step(dp, batch, PACKED)
    finally:
        group.leave()
    one = _backend(tiny_model_spec, FAST)
    ppo_step(one, batch, FAST)
    for net, lr in (("actor", FAST.actor_lr), ("critic", FAST.critic_lr)):
        a, b = dict(getattr(one, net).named_parameters()), dict(getattr(dp, net).named_parameters())
        assert max(float((a[n] - b[n]).detach().abs().max()) for n in a) < 0.02 * lr, net
