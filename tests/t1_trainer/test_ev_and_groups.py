"""Explained variance per token and per trajectory, pre and post update (T1 Eq. 19); GRPO groups (T1 §9)."""

import math
from dataclasses import dataclass

import numpy as np
import pytest

from t1_spec import GRPOAdvantageSpec, PPOSpec
from t1_trainer.advantages import GRPOEstimator
from t1_trainer.algorithms import explained_variances, grpo_advantages
from t1_trainer.step import critic_warmup_step, ppo_step
from t1_trainer.torch_backend import TorchBackend

GRPO = PPOSpec(batch_size=2, samples_per_task=2, advantage=GRPOAdvantageSpec(group_size=2))


@dataclass
class S:
    """The fields the functions under test read: a 6-token stream with loss on positions 2, 3 and 5."""

    reward: float
    task_id: str
    trial_id: str
    chunk_index: int = 0
    loss_mask: np.ndarray = None
    reward_index: int = 5

    def __post_init__(self):
        self.loss_mask = np.array([0, 0, 1, 1, 0, 1], dtype=np.int8)


def _ev(v, r):
    v, r = np.asarray(v, float), np.asarray(r, float)
    return 1.0 - np.var(r - v) / np.var(r)


def test_trajectory_ev_takes_one_point_per_trial_from_its_first_chunk():
    # trial "long" has two chunks; only its first chunk's first loss token is its V(s_0)
    samples = [
        S(1.0, "a", "long", chunk_index=1),
        S(1.0, "a", "long", chunk_index=0),
        S(0.0, "b", "short"),
        S(0.5, "c", "mid"),
    ]
    values = [np.array([0, 0, v, 0.9, 0, 0.1]) for v in (0.2, 0.8, 0.3, 0.4)]
    returns = [np.asarray(s.loss_mask) * s.reward for s in samples]
    ev_token, ev_traj = explained_variances(samples, values, returns)
    m = [s.loss_mask.astype(bool) for s in samples]
    tok_v = np.concatenate([v[k] for v, k in zip(values, m, strict=True)])
    tok_r = np.concatenate([r[k] for r, k in zip(returns, m, strict=True)])
    assert ev_token == pytest.approx(_ev(tok_v, tok_r))
    # long: V 0.8 (chunk 0, not chunk 1's 0.2), short: 0.3, mid: 0.4
    assert ev_traj == pytest.approx(_ev([0.8, 0.3, 0.4], [1.0, 0.0, 0.5]))
    assert ev_traj != pytest.approx(_ev([0.2, 0.8, 0.3, 0.4], [1.0, 1.0, 0.0, 0.5]))


def test_trajectory_ev_is_undefined_with_one_trial_or_equal_returns():
    one = [S(1.0, "a", "t", chunk_index=0), S(1.0, "a", "t", chunk_index=1)]
    values = [np.zeros(6), np.ones(6)]
    returns = [np.asarray(s.loss_mask) * 1.0 for s in one]
    assert math.isnan(explained_variances(one, values, returns)[1])
    equal = [S(0.5, "a", "x"), S(0.5, "b", "y")]
    same = [np.asarray(s.loss_mask) * 0.5 for s in equal]
    assert all(math.isnan(e) for e in explained_variances(equal, [np.zeros(6)] * 2, same))


def test_identical_rewards_give_exactly_zero_advantage():
    # (r - mean) / (std + eps) leaves 1e-11 of float rounding for three rewards of 0.05 (T1 §9: no gradient)
    (a,) = grpo_advantages([[0.05, 0.05, 0.05]])
    assert np.array_equal(a, np.zeros(3))


def test_grpo_counts_a_chunked_trial_once_and_gives_every_chunk_its_advantage():
    # group a: trial a1 (two chunks, reward 1) and a2 (reward 0): r = [1, 0] -> advantages +1, -1; counting
    # chunks as members would make it [1, 1, 0] -> +0.71, -1.41
    samples = [
        S(1.0, "a", "a1", 0),
        S(1.0, "a", "a1", 1),
        S(0.0, "a", "a2"),
        S(0.2, "b", "b1"),
        S(0.2, "b", "b2"),
    ]
    advs, _ = GRPOEstimator.compute(samples, None, GRPO.advantage)
    at = [float(a[5]) for a in advs]
    assert at[:3] == pytest.approx([1.0, 1.0, -1.0], abs=1e-5)
    assert at[3:] == [0.0, 0.0]
    for a, s in zip(advs, samples, strict=True):
        assert not a[s.loss_mask == 0].any()
    m = GRPOEstimator.metrics(samples, advs)
    assert (m["grpo/groups"], m["grpo/group_size_min"], m["grpo/group_size_max"]) == (2, 2, 2)
    assert (m["grpo/uniform_groups"], m["grpo/uniform_group_fraction"]) == (1, 0.5)
    assert m["grpo/group_advantage_mean_abs_max"] < 1e-6


@pytest.fixture(scope="module")
def batch(tiny_model_spec, sample_with):
    from t1_policy import build_model

    model = build_model(tiny_model_spec, seed=0)
    return [
        sample_with(model, prompt_len=30, turns=[(8, 10), (8, 0)], reward=r, seed=i, task_id=f"t{i}")
        for i, r in enumerate([0.1, 0.6, 0.35])
    ]


@pytest.mark.parametrize("update", [ppo_step, critic_warmup_step], ids=["ppo", "warmup"])
def test_pre_and_post_update_ev_are_the_critic_before_and_after_its_step(tiny_model_spec, batch, update):
    hp = PPOSpec(batch_size=3, actor_lr=1e-4, critic_lr=1e-3)
    be = TorchBackend(model_spec=tiny_model_spec, ppo_spec=hp, seed=0)
    before = be.values(batch)
    returns = [np.asarray(s.loss_mask) * s.reward for s in batch]  # gamma = lam = 1: R_j = R
    m = update(be, batch, hp)
    after = be.values(batch)
    assert (m["critic/ev_token_pre"], m["critic/ev_trajectory_pre"]) == pytest.approx(
        explained_variances(batch, before, returns)
    )
    assert m["critic/explained_variance"] == m["critic/ev_token_pre"]  # the existing key keeps its meaning
    post = (m["critic/ev_token_post"], m["critic/ev_trajectory_post"])
    assert post == pytest.approx(explained_variances(batch, after, returns))
    assert post != pytest.approx(
        (m["critic/ev_token_pre"], m["critic/ev_trajectory_pre"])
    )  # the critic moved
    # per trajectory: V(s_0) at each trial's first loss token, recomputed here
    first = [int(np.flatnonzero(s.loss_mask)[0]) for s in batch]
    expect = _ev([v[j] for v, j in zip(after, first, strict=True)], [s.reward for s in batch])
    assert m["critic/ev_trajectory_post"] == pytest.approx(expect, rel=1e-5)
