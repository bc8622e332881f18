"""The step order (T1 §4.5: critic before actor, pre-update values anchor GAE and the value clip)."""

import numpy as np
import pytest

from t1_spec import GAEAdvantageSpec, GRPOAdvantageSpec, PPOSpec
from t1_trainer.advantages import compute_advantages
from t1_trainer.step import critic_warmup_step, ppo_step

PAPER = PPOSpec(batch_size=2)
GRPO = PPOSpec(batch_size=3, samples_per_task=2, advantage=GRPOAdvantageSpec(group_size=2))


@pytest.fixture
def mk(Sample):  # noqa: N803
    def make(reward, task="t"):
        return _sample(Sample, reward, task=task)

    return make


def _sample(Sample, reward, values_len=8, task="t"):  # noqa: N803
    mask = np.array([0, 0, 1, 1, 0, 0, 1, 1], dtype=np.int8)[:values_len]
    return Sample(
        token_ids=np.arange(values_len, dtype=np.int32),
        loss_mask=mask,
        rollout_logprobs=np.where(mask == 1, -1.0, 0.0).astype(np.float32),
        routing=None,
        reward=reward,
        reward_index=7,
        task_id=task,
        family="scripting",
        trial_id=f"trial-{task}-{reward}",
        chunk_index=0,
        policy_version=0,
    )


class SpyBackend:
    """Records the calls and the arrays it receives; no model."""

    def __init__(self):
        self.calls = []
        self.v = [np.linspace(0.0, 0.7, 8, dtype=np.float32), np.full(8, 0.25, dtype=np.float32)]

    def routing_errors(self, samples):
        self.calls.append("routing_errors")
        return {}

    def values(self, samples):
        self.calls.append("values")
        return [v.copy() for v in self.v]

    def update_critic(self, samples, returns, old_values):
        self.calls.append("update_critic")
        self.returns, self.old_values = returns, old_values
        return {"critic/value_loss": 0.0}

    def update_actor(self, samples, advantages):
        self.calls.append("update_actor")
        self.advantages = advantages
        return {"actor/policy_loss": 0.0, "samples_aborted_routing": 0, "routing_errors": []}

    def export_weights(self):
        return {}


def test_critic_updated_before_actor_with_pre_update_values(mk):
    spy = SpyBackend()
    samples = [mk(0.5), mk(0.1)]
    m = ppo_step(spy, samples, PAPER)
    assert spy.calls == ["routing_errors", "values", "update_critic", "update_actor"]
    # the critic's clip anchor is exactly the values GAE used
    for old, v in zip(spy.old_values, spy.v, strict=True):
        np.testing.assert_array_equal(old, v)
    # gamma = lam = 1: A_j = R - V_old(s_j), returns = R on loss tokens, 0 elsewhere
    mask = samples[0].loss_mask.astype(bool)
    for s, v, a, r in zip(samples, spy.v, spy.advantages, spy.returns, strict=True):
        np.testing.assert_allclose(a[mask], s.reward - v[mask], atol=1e-6)
        np.testing.assert_allclose(r[mask], s.reward, atol=1e-6)
        assert not a[~mask].any() and not r[~mask].any()
    # EV over loss tokens from the pre-update values, computed independently
    v_cat = np.concatenate([v[mask] for v in spy.v])
    r_cat = np.concatenate([np.full(mask.sum(), s.reward) for s in samples])
    expected = 1 - np.var(r_cat - v_cat) / np.var(r_cat)
    assert m["critic/explained_variance"] == pytest.approx(expected, rel=1e-5)


def test_aborted_routing_excluded_from_critic_and_actor(mk):
    spy = SpyBackend()
    spy.routing_errors = lambda samples: {0: "sample task/trial#0: routing record missing (aborted)"}
    spy.v = spy.v[1:]
    m = ppo_step(spy, [mk(0.5), mk(0.1)], PAPER)
    assert m["samples_aborted_routing"] == 1 and "missing" in m["routing_errors"][0]
    assert len(spy.returns) == 1 and len(spy.advantages) == 1


def test_grpo_ablation_uses_group_baseline_and_no_critic(mk):
    samples = [mk(1.0, task="a"), mk(0.0, task="a"), mk(0.3, task="b")]
    advs, _ = compute_advantages(samples, None, GRPO)
    mask = samples[0].loss_mask.astype(bool)
    assert advs[0][mask] == pytest.approx(np.ones(4), abs=1e-5)
    assert advs[1][mask] == pytest.approx(-np.ones(4), abs=1e-5)
    assert not advs[
        2
    ].any()  # a group of one carries no signal (why T1 §9 rejects GRPO at one sample per task)


def test_grpo_step_neither_computes_values_nor_updates_the_critic(mk):
    spy = SpyBackend()
    m = ppo_step(spy, [mk(1.0, task="a"), mk(0.0, task="a")], GRPO)
    assert spy.calls == ["routing_errors", "update_actor"]
    assert "critic/explained_variance" not in m
    mask = mk(0.0).loss_mask.astype(bool)
    assert spy.advantages[0][mask] == pytest.approx(np.ones(4), abs=1e-5)


def test_gae_dispatch_uses_the_specs_discount(mk):
    # V = 0 and one terminal reward R: A_j = gamma^(loss tokens after j) * R, since masked context adds no
    # decay (T1 §4.5 recursion over loss tokens); loss tokens of the stream are 2, 3, 6, 7
    spec = PPOSpec(batch_size=2, advantage=GAEAdvantageSpec(gamma=0.5, lam=1.0))
    s = mk(1.0)
    advs, rets = compute_advantages([s], [np.zeros(8, dtype=np.float32)], spec)
    np.testing.assert_allclose(advs[0], [0, 0, 0.125, 0.25, 0, 0, 0.5, 1.0], atol=1e-7)
    np.testing.assert_allclose(rets[0], advs[0], atol=1e-7)  # R_j = A_j + V_j with V = 0


def test_warmup_with_grpo_spec_regresses_on_the_gae_default_returns(mk):
    # warm-up is a GAE regression whatever the estimator; GAEAdvantageSpec's defaults are gamma = lam = 1
    spy = SpyBackend()
    samples = [mk(0.5), mk(0.1)]
    critic_warmup_step(spy, samples, GRPO)
    assert spy.calls == ["values", "update_critic"]
    mask = samples[0].loss_mask.astype(bool)
    for s, r in zip(samples, spy.returns, strict=True):
        np.testing.assert_allclose(r[mask], s.reward, atol=1e-6)
