"""Versions and staleness (T1 Appendix 12): refusal off the expected staleness, metrics, publication, ratio.

The synchronous loop trains at staleness 0 and the one-step asynchronous loop at exactly 1; a sample at any
other staleness, or a chunk mixing versions, is refused before any update. At staleness 1 the PPO ratio's
denominator is the rollout's log-probs (the behaviour policy ``pi_{t-1}``), at 0 the trainer's recomputation.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from t1_spec import PPOSpec
from t1_trainer.errors import StalenessError, TrainerConfigError
from t1_trainer.publish import publish_weights
from t1_trainer.step import check_staleness, ppo_step

PAPER = PPOSpec(batch_size=2)
TINY_RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "tiny-cpu.yaml"


def _sample(Sample, *, version, trial="a", mixed=False):  # noqa: N803
    mask = np.array([0, 0, 1, 1, 0, 0, 1, 1], dtype=np.int8)
    return Sample(
        token_ids=np.arange(8, dtype=np.int32),
        loss_mask=mask,
        rollout_logprobs=np.where(mask == 1, -1.0, 0.0).astype(np.float32),
        routing=None,
        reward=0.5,
        reward_index=7,
        task_id="t",
        family="scripting",
        trial_id=trial,
        chunk_index=0,
        policy_version=version,
        policy_versions_mixed=mixed,
    )


class Spy:
    """A backend that records its calls; ``policy_version`` as the contract gives it."""

    def __init__(self, version):
        self.policy_version = version
        self.calls = []
        self.actor_kwargs = None
        self.exports = 0

    def routing_errors(self, samples):
        self.calls.append("routing_errors")
        return {}

    def values(self, samples):
        self.calls.append("values")
        return [np.zeros(8, dtype=np.float32) for _ in samples]

    def update_critic(self, samples, returns, old_values):
        self.calls.append("update_critic")
        return {}

    def update_actor(self, samples, advantages, **kwargs):
        self.calls.append("update_actor")
        self.actor_kwargs = kwargs
        return {"samples_aborted_routing": 0, "routing_errors": []}

    def export_weights(self):
        self.exports += 1
        return {"w": torch.zeros(1)}


# ---- refusal ----


def test_a_sample_three_versions_stale_is_refused_by_name_before_any_update(Sample):  # noqa: N803
    spy = Spy(version=4)
    fresh, old = _sample(Sample, version=3, trial="fresh"), _sample(Sample, version=1, trial="old")
    with pytest.raises(StalenessError) as err:
        ppo_step(spy, [fresh, old], PAPER, staleness=1)
    msg = str(err.value)
    assert "t/old#0" in msg and "t/fresh#0" not in msg
    assert "drawn by version 1 (staleness 3)" in msg
    assert "holds policy version 4" in msg and "expects staleness 1" in msg
    assert (err.value.sample, err.value.sample_version, err.value.trainer_version, err.value.expected) == (
        "t/old#0",
        1,
        4,
        1,
    )
    assert spy.calls == []  # nothing was computed, let alone updated


def test_the_synchronous_default_refuses_a_stale_sample(Sample):  # noqa: N803
    spy = Spy(version=3)
    with pytest.raises(StalenessError, match=r"t/a#0 drawn by version 0 \(staleness 3\)"):
        ppo_step(spy, [_sample(Sample, version=0)], PAPER)
    assert spy.calls == []


def test_a_stale_step_is_refused_in_synchronous_mode_and_asynchronous_at_zero(Sample):  # noqa: N803
    # asynchronous mode after its first step expects 1: a fresh (staleness 0) sample is refused too
    with pytest.raises(StalenessError, match=r"staleness 0\)"):
        ppo_step(Spy(version=2), [_sample(Sample, version=2)], PAPER, staleness=1)


def test_a_negative_staleness_is_refused(Sample):  # noqa: N803
    spy = Spy(version=0)
    with pytest.raises(StalenessError, match=r"staleness=-1: must be an int >= 0"):
        ppo_step(spy, [_sample(Sample, version=0)], PAPER, staleness=-1)
    with pytest.raises(StalenessError, match="must be an int"):
        check_staleness(spy, [], 1.0)  # type: ignore[arg-type]
    assert spy.calls == []


def test_a_sample_newer_than_the_trainer_is_refused(Sample):  # noqa: N803
    with pytest.raises(StalenessError, match=r"staleness -1, newer than the trainer's weights"):
        ppo_step(Spy(version=1), [_sample(Sample, version=2)], PAPER)


def test_a_chunk_mixing_versions_is_refused(Sample):  # noqa: N803
    spy = Spy(version=1)
    with pytest.raises(StalenessError, match=r"t/a#0 mixes weight versions \(oldest 0\)"):
        ppo_step(spy, [_sample(Sample, version=0, mixed=True)], PAPER, staleness=1)
    assert spy.calls == []


def test_more_than_three_refused_samples_are_counted(Sample):  # noqa: N803
    samples = [_sample(Sample, version=0, trial=f"x{i}") for i in range(5)]
    with pytest.raises(StalenessError, match=r"5 of 5 samples .* \(and 2 more\)"):
        ppo_step(Spy(version=2), samples, PAPER, staleness=1)


def test_a_sample_older_than_max_staleness_is_refused_by_that_bound(Sample):  # noqa: N803
    spy = Spy(version=5)
    ok, old = _sample(Sample, version=3, trial="ok"), _sample(Sample, version=2, trial="old")
    with pytest.raises(StalenessError) as err:
        ppo_step(spy, [ok, old], PAPER, staleness=2, max_staleness=2)
    msg = str(err.value)
    assert msg.startswith("1 of 2 samples are older than runtime.max_staleness 2")
    assert "t/old#0 drawn by version 2 (staleness 3)" in msg and "t/ok#0" not in msg
    assert (err.value.sample, err.value.sample_version, err.value.trainer_version) == ("t/old#0", 2, 5)
    assert spy.calls == []


def test_a_step_asked_to_train_above_max_staleness_is_refused(Sample):  # noqa: N803
    spy = Spy(version=5)
    with pytest.raises(StalenessError, match=r"1 of 1 samples are older than runtime.max_staleness 1"):
        ppo_step(spy, [_sample(Sample, version=3)], PAPER, staleness=2, max_staleness=1)
    with pytest.raises(StalenessError, match=r"ppo_step staleness=2 is older than runtime.max_staleness 1"):
        check_staleness(spy, [], 2, max_staleness=1)
    assert spy.calls == []


def test_a_batch_at_max_staleness_trains_on_the_rollouts_logprobs(Sample):  # noqa: N803
    spy = Spy(version=5)
    metrics = ppo_step(spy, [_sample(Sample, version=3)], PAPER, staleness=2, max_staleness=2)
    assert metrics["staleness"] == metrics["staleness_min"] == 2
    assert spy.actor_kwargs["old_logprobs"] == "rollout"  # as at staleness 1: the trainer lacks pi_{t-2}


# ---- metrics and the behaviour log-probs the backend is asked for ----


def test_metrics_carry_staleness_and_the_rollout_logprobs_are_asked_for_at_one(Sample):  # noqa: N803
    spy = Spy(version=5)
    m = ppo_step(spy, [_sample(Sample, version=4), _sample(Sample, version=4, trial="b")], PAPER, staleness=1)
    assert (m["staleness"], m["staleness_min"], m["trainer/policy_version"]) == (1, 1, 5)
    assert spy.calls == ["routing_errors", "values", "update_critic", "update_actor"]
    assert spy.actor_kwargs == {"old_logprobs": "rollout"}


def test_staleness_zero_keeps_the_old_call(Sample):  # noqa: N803
    spy = Spy(version=2)
    m = ppo_step(spy, [_sample(Sample, version=2)], PAPER)
    assert (m["staleness"], m["staleness_min"], m["trainer/policy_version"]) == (0, 0, 2)
    assert spy.actor_kwargs == {}  # the synchronous path calls update_actor exactly as before


def test_a_numpy_integer_staleness_is_accepted(Sample):  # noqa: N803
    m = ppo_step(Spy(version=1), [_sample(Sample, version=0)], PAPER, staleness=np.int64(1))
    assert m["staleness"] == 1 and type(m["staleness"]) is int


def test_an_empty_batch_reports_no_staleness():
    assert check_staleness(Spy(version=3), [], 1) == {"trainer/policy_version": 3}


# ---- publication advances the trainer's version ----


class Engine:
    def __init__(self, version=0, fail=False):
        self.weight_version, self.fail, self.paused = version, fail, False

    def pause(self):
        self.paused = True

    def resume(self):
        self.paused = False

    def update_weights(self, state_dict, *, weight_version):
        if self.fail:
            raise RuntimeError("update failed")
        self.weight_version = weight_version


def test_publication_sets_receivers_and_backend_to_the_same_next_version():
    backend, engines = Spy(version=0), [Engine(), Engine()]
    publish_weights(backend, engines)
    assert [e.weight_version for e in engines] == [1, 1] and backend.policy_version == 1
    publish_weights(backend, engines)
    assert [e.weight_version for e in engines] == [2, 2] and backend.policy_version == 2
    assert backend.exports == 2


def test_publication_without_receivers_still_advances_the_backend():
    backend = Spy(version=0)
    assert publish_weights(backend, []) >= 0.0
    assert backend.policy_version == 1 and backend.exports == 0  # nothing to send, nothing exported
    # a receiver that missed that publication gets the next version, never a reused one
    engine = Engine(version=0)
    publish_weights(backend, engine)
    assert engine.weight_version == 2 and backend.policy_version == 2


def test_a_failed_publication_leaves_the_backend_version():
    backend = Spy(version=3)
    with pytest.raises(RuntimeError, match="update failed"):
        publish_weights(backend, [Engine(version=3, fail=True)])
    assert backend.policy_version == 3


def test_a_sync_cycle_trains_at_zero_and_an_async_one_at_one(Sample):  # noqa: N803
    backend, engine = Spy(version=0), Engine()
    # synchronous: sample at the engine's version, train, publish; the next batch is again staleness 0
    for _ in range(2):
        ppo_step(backend, [_sample(Sample, version=engine.weight_version)], PAPER)
        publish_weights(backend, engine)
    # asynchronous: the batch was drawn before the last publication, so it is exactly one version behind
    drawn = engine.weight_version
    ppo_step(backend, [_sample(Sample, version=drawn)], PAPER)
    publish_weights(backend, engine)
    m = ppo_step(backend, [_sample(Sample, version=drawn)], PAPER, staleness=1)
    assert m["staleness"] == 1 and backend.policy_version == 3


# ---- the ratio on a real model: recomputed at staleness 0, the rollout's at staleness 1 ----

SHIFT = 0.3
"""Nats subtracted from the sampler's log-probs, so recomputed and rollout log-probs differ by a known gap."""


@pytest.fixture(scope="module")
def shifted_batch(tiny_model_spec, sample_with):
    from t1_policy import build_model

    sampler = build_model(tiny_model_spec, seed=0)
    batch = [
        sample_with(sampler, prompt_len=24, turns=[(6, 8), (6, 0)], reward=r, seed=i, task_id=f"t{i}")
        for i, r in enumerate([0.1, 0.6])
    ]
    out = []
    for s in batch:
        lp = np.where(s.loss_mask == 1, s.rollout_logprobs - SHIFT, 0.0).astype(np.float32)
        out.append(dataclasses.replace(s, rollout_logprobs=lp))
    return out


def _expected(be, batch):
    """Independent figures from the backend's pre-update networks: the first pass's ratios and its loss."""
    be.actor.train()
    values = be.values(batch)
    num, ratios = 0.0, []
    for s in batch:
        m = s.loss_mask.astype(bool)
        with torch.no_grad(), be.replayed(s):
            logp = be.actor_logprobs(s).double().numpy()
        ratios.append(np.exp(logp - s.rollout_logprobs[m].astype(np.float64)))
        num += m.sum()
    loss = 0.0
    for s, v, r in zip(batch, values, ratios, strict=True):
        adv = s.reward - v[s.loss_mask.astype(bool)].astype(np.float64)  # gamma = lam = 1: A_j = R - V(s_j)
        loss += float(-np.minimum(r * adv, np.clip(r, 0.8, 1.2) * adv).sum())
    return np.concatenate(ratios), loss / num


def test_the_ratio_follows_the_rollout_at_one_and_the_recomputation_at_zero(tiny_model_spec, shifted_batch):
    from t1_trainer.torch_backend import TorchBackend

    hp = PPOSpec(batch_size=2)  # one pass: the last pass's ratio metrics are the first pass's
    sync = TorchBackend(model_spec=tiny_model_spec, ppo_spec=hp, seed=0)
    assert sync.policy_version == 0
    m0 = ppo_step(sync, shifted_batch, hp)
    assert m0["actor/ratio_min"] == m0["actor/ratio_max"] == 1.0  # recomputed: exactly the same forward
    assert m0["actor/logprob_gap_replay"] == pytest.approx(SHIFT, abs=1e-3)  # the gap still sees the shift

    stale = TorchBackend(model_spec=tiny_model_spec, ppo_spec=hp, seed=0)
    stale.policy_version = 1  # one publication since the batch was drawn at version 0
    ratios, loss = _expected(stale, shifted_batch)
    assert ratios.mean() == pytest.approx(np.exp(SHIFT), rel=2e-3)  # the sampler matches the trainer
    m1 = ppo_step(stale, shifted_batch, hp, staleness=1)
    assert m1["staleness"] == m1["staleness_min"] == 1
    assert m1["actor/ratio_mean"] == pytest.approx(ratios.mean(), rel=1e-5)
    assert m1["actor/ratio_min"] == pytest.approx(ratios.min(), rel=1e-5)
    assert m1["actor/ratio_max"] == pytest.approx(ratios.max(), rel=1e-5)
    assert m1["actor/policy_loss_first"] == pytest.approx(loss, rel=1e-4, abs=1e-6)
    assert m1["actor/clip_fraction"] > 0.0  # exp(0.3) = 1.35 lies outside the 1 +- 0.2 band
    assert m1["actor/logprob_gap_replay"] == pytest.approx(m0["actor/logprob_gap_replay"], rel=1e-5)


def test_update_actor_refuses_an_unknown_behaviour_source(tiny_model_spec, shifted_batch):
    from t1_trainer.torch_backend import TorchBackend

    be = TorchBackend(model_spec=tiny_model_spec, ppo_spec=PAPER, seed=0)
    advs = [np.zeros(len(s.token_ids), dtype=np.float32) for s in shifted_batch]
    with pytest.raises(TrainerConfigError, match="old_logprobs='proximal'"):
        be.update_actor(shifted_batch, advs, old_logprobs="proximal")  # type: ignore[arg-type]


def test_the_megatron_backend_takes_the_rollouts_logprobs_at_one_too(tiny_model_spec, sample_with):
    pytest.importorskip(
        "megatron.core", reason="megatron-core (the t1-trainer[megatron] extra) is not installed"
    )
    from t1_policy import build_model
    from t1_spec import ModelSpec, load_recipe
    from t1_trainer.megatron.backend import MegatronBackend

    # every layer full attention: megatron's Gated DeltaNet needs CUDA (as in test_megatron_backend.py)
    spec = ModelSpec(**{**tiny_model_spec.model_dump(), "full_attention_interval": 1})
    sampler = build_model(spec, seed=0)
    batch = []
    for i, r in enumerate([0.1, 0.6]):
        s = sample_with(sampler, prompt_len=24, turns=[(6, 8), (6, 0)], reward=r, seed=i, task_id=f"t{i}")
        lp = np.where(s.loss_mask == 1, s.rollout_logprobs - SHIFT, 0.0).astype(np.float32)
        batch.append(dataclasses.replace(s, rollout_logprobs=lp))
    hp, plan = PPOSpec(batch_size=2), load_recipe(TINY_RECIPE).plan
    be = MegatronBackend(model_spec=spec, ppo_spec=hp, plan=plan, seed=0, actor=sampler)
    assert be.policy_version == 0
    be.policy_version = 1
    be.actor.train()
    ratios = []
    for s in batch:
        with torch.no_grad(), be.replayed(s):
            logp = be.actor_logprobs(s).double().numpy()
        ratios.append(np.exp(logp - s.rollout_logprobs[s.loss_mask.astype(bool)].astype(np.float64)))
    expected = np.concatenate(ratios)
    m = ppo_step(be, batch, hp, staleness=1)
    assert m["staleness"] == 1
    assert m["actor/ratio_mean"] == pytest.approx(expected.mean(), rel=1e-5)
    assert m["actor/ratio_max"] == pytest.approx(expected.max(), rel=1e-5)
    assert m["actor/ratio_mean"] == pytest.approx(np.exp(SHIFT), rel=1e-2)  # two implementations, one net
