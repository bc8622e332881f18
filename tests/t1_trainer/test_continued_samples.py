"""Samples carried over by partial-rollout continuation (T1 §10): accepted only by the recipe's allowance.

A trajectory parked at the end of step t and continued in step t+1 reaches the trainer at version t+1 with
turns of versions t and t+1 (``policy_versions_mixed``, oldest t: staleness 1) beside fresh samples of
staleness 0. With ``rollout.continuation`` off the check stays strict; on, such samples are accepted up to
``max_resumes`` versions, and each takes the rollout's per-token log-probs as the PPO ratio's denominator (T1
Eq. 17, Appendix 12) while the fresh ones keep the trainer's recomputation.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from t1_spec import PPOSpec, load_recipe
from t1_trainer.errors import StalenessError, TrainerConfigError
from t1_trainer.step import check_staleness, continuation_lag, ppo_step

PAPER = PPOSpec(batch_size=2)
TINY = Path(__file__).resolve().parents[2] / "recipes" / "tiny-cpu.yaml"
SHIFT = 0.3
"""Nats subtracted from the sampler's log-probs, so recomputed and rollout log-probs differ by a known gap."""


def _sample(Sample, *, version, trial="a", mixed=False, loss=2):  # noqa: N803
    mask = np.zeros(8, dtype=np.int8)
    mask[-loss:] = 1
    return Sample(
        token_ids=np.arange(8, dtype=np.int32),
        loss_mask=mask,
        rollout_logprobs=np.where(mask == 1, -1.0, 0.0).astype(np.float32),
        routing=None,
        reward=0.5,
        reward_index=7,
        task_id="t",
        family="f",
        trial_id=trial,
        chunk_index=0,
        policy_version=version,
        policy_versions_mixed=mixed,
    )


class Spy:
    def __init__(self, version):
        self.policy_version, self.actor_kwargs = version, None

    def routing_errors(self, samples):
        return {}

    def values(self, samples):
        return [np.zeros(8, dtype=np.float32) for _ in samples]

    def update_critic(self, samples, returns, old_values):
        return {}

    def update_actor(self, samples, advantages, **kwargs):
        self.actor_kwargs = kwargs
        return {"samples_aborted_routing": 0, "routing_errors": []}


def test_the_allowance_comes_from_the_recipe_and_is_zero_when_continuation_is_off():
    off = load_recipe(TINY)
    assert continuation_lag(off.rollout) == 0
    on = load_recipe(TINY, ["rollout.continuation.enabled=true", "rollout.continuation.max_resumes=2"])
    assert continuation_lag(on.rollout) == 2


def test_a_continued_mixed_chunk_is_refused_without_continuation(Sample):  # noqa: N803
    spy = Spy(version=1)
    batch = [_sample(Sample, version=1, trial="fresh"), _sample(Sample, version=0, trial="cont", mixed=True)]
    with pytest.raises(StalenessError, match=r"t/cont#0 mixes weight versions \(oldest 0\)"):
        ppo_step(spy, batch, PAPER)
    assert spy.actor_kwargs is None  # nothing was updated


def test_with_continuation_the_continued_chunk_takes_the_rollouts_logprobs_and_the_fresh_one_recomputes(
    Sample,  # noqa: N803
):
    spy = Spy(version=1)
    batch = [
        _sample(Sample, version=1, trial="fresh", loss=3),
        _sample(Sample, version=0, trial="cont", mixed=True, loss=1),
    ]
    m = ppo_step(spy, batch, PAPER, continuation_lag=1)
    assert spy.actor_kwargs == {"old_logprobs": ["recomputed", "rollout"]}
    assert (m["staleness"], m["staleness_min"], m["samples_versions_mixed"]) == (1, 0, 1)
    assert m["staleness_loss_token_share"] == {"0": 0.75, "1": 0.25}  # 3 fresh loss tokens, 1 continued


def test_a_sample_beyond_the_allowance_or_newer_than_the_trainer_is_still_refused(Sample):  # noqa: N803
    with pytest.raises(StalenessError, match=r"expects staleness 0 to 1 \(partial-rollout continuation\)"):
        ppo_step(Spy(version=2), [_sample(Sample, version=0, mixed=True)], PAPER, continuation_lag=1)
    with pytest.raises(StalenessError, match="newer than the trainer's weights"):
        ppo_step(Spy(version=1), [_sample(Sample, version=2)], PAPER, continuation_lag=1)
    with pytest.raises(StalenessError, match="continuation_lag=-1"):
        check_staleness(Spy(version=1), [], 0, continuation_lag=-1)


def test_a_batch_without_continued_samples_keeps_the_synchronous_call(Sample):  # noqa: N803
    spy = Spy(version=3)
    m = ppo_step(spy, [_sample(Sample, version=3)], PAPER, continuation_lag=1)
    assert spy.actor_kwargs == {} and m["staleness_loss_token_share"] == {"0": 1.0}


@pytest.fixture(scope="module")
def mixed_batch(tiny_model_spec, sample_with):
    """Two samples of one sampler, the rollout's log-probs shifted by SHIFT: one fresh, one continued."""
    from t1_policy import build_model

    sampler = build_model(tiny_model_spec, seed=0)
    out = []
    for i, r in enumerate([0.1, 0.6]):
        s = sample_with(sampler, prompt_len=24, turns=[(6, 8), (6, 0)], reward=r, seed=i, task_id=f"t{i}")
        lp = np.where(s.loss_mask == 1, s.rollout_logprobs - SHIFT, 0.0).astype(np.float32)
        out.append(dataclasses.replace(s, rollout_logprobs=lp, policy_version=1))
    out[1] = dataclasses.replace(out[1], policy_version=0, policy_versions_mixed=True)
    return out


def test_on_a_real_model_the_continued_chunks_ratio_is_against_the_rollout(tiny_model_spec, mixed_batch):
    import torch

    from t1_trainer.torch_backend import TorchBackend

    hp = PPOSpec(batch_size=2)  # one pass: the last pass's ratio metrics are the first pass's
    be = TorchBackend(model_spec=tiny_model_spec, ppo_spec=hp, seed=0)
    be.policy_version = 1  # one publication since the continued chunk's first turns were sampled
    be.actor.train()
    cont = mixed_batch[1]
    with torch.no_grad(), be.replayed(cont):
        logp = be.actor_logprobs(cont).double().numpy()
    expected = np.exp(logp - cont.rollout_logprobs[cont.loss_mask.astype(bool)].astype(np.float64))
    n_fresh = int(mixed_batch[0].loss_mask.sum())
    m = ppo_step(be, mixed_batch, hp, continuation_lag=1)
    assert (m["staleness"], m["staleness_min"]) == (1, 0)
    # the fresh sample's ratio is exactly 1 (same forward); the continued one's is against the rollout
    assert m["actor/ratio_min"] == 1.0
    assert m["actor/ratio_max"] == pytest.approx(expected.max(), rel=1e-5)
    assert m["actor/ratio_mean"] == pytest.approx(
        (n_fresh + expected.sum()) / (n_fresh + expected.size), rel=1e-5
    )
    assert expected.mean() == pytest.approx(np.exp(SHIFT), rel=2e-3)


def test_update_actor_refuses_a_per_sample_list_of_the_wrong_length(tiny_model_spec, mixed_batch):
    from t1_trainer.torch_backend import TorchBackend

    be = TorchBackend(model_spec=tiny_model_spec, ppo_spec=PAPER, seed=0)
    advs = [np.zeros(len(s.token_ids), dtype=np.float32) for s in mixed_batch]
    with pytest.raises(TrainerConfigError, match="1 per-sample choices for 2 samples"):
        be.update_actor(mixed_batch, advs, old_logprobs=["rollout"])
    with pytest.raises(TrainerConfigError, match="'proximal'"):
        be.update_actor(mixed_batch, advs, old_logprobs=["rollout", "proximal"])  # type: ignore[list-item]


def test_the_megatron_backend_takes_the_rollouts_logprobs_per_sample_too(tiny_model_spec, sample_with):
    pytest.importorskip(
        "megatron.core", reason="megatron-core (the t1-trainer[megatron] extra) is not installed"
    )
    import torch

    from t1_policy import build_model
    from t1_spec import ModelSpec
    from t1_trainer.megatron.backend import MegatronBackend

    # every layer full attention: megatron's Gated DeltaNet needs CUDA (as in test_megatron_backend.py)
    spec = ModelSpec(**{**tiny_model_spec.model_dump(), "full_attention_interval": 1})
    sampler = build_model(spec, seed=0)
    batch = []
    for i, r in enumerate([0.1, 0.6]):
        s = sample_with(sampler, prompt_len=24, turns=[(6, 8), (6, 0)], reward=r, seed=i, task_id=f"t{i}")
        lp = np.where(s.loss_mask == 1, s.rollout_logprobs - SHIFT, 0.0).astype(np.float32)
        batch.append(dataclasses.replace(s, rollout_logprobs=lp, policy_version=1))
    batch[1] = dataclasses.replace(batch[1], policy_version=0, policy_versions_mixed=True)
    hp = PPOSpec(batch_size=2)
    be = MegatronBackend(model_spec=spec, ppo_spec=hp, plan=load_recipe(TINY).plan, seed=0, actor=sampler)
    be.policy_version = 1
    be.actor.train()
    cont = batch[1]
    with torch.no_grad(), be.replayed(cont):
        logp = be.actor_logprobs(cont).double().numpy()
    expected = np.exp(logp - cont.rollout_logprobs[cont.loss_mask.astype(bool)].astype(np.float64))
    m = ppo_step(be, batch, hp, continuation_lag=1)
    assert m["actor/ratio_min"] == 1.0  # the fresh sample: recomputed, the same forward
    assert m["actor/ratio_max"] == pytest.approx(expected.max(), rel=1e-5)
