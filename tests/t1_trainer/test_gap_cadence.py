"""The live-routing gap of T1 §4.3 (Fig. 6): measured every ``trainer.logprob_gap_every`` steps only."""

import numpy as np
import pytest

from t1_spec import PPOSpec, load_recipe
from t1_trainer.step import ppo_step
from t1_trainer.torch_backend import TorchBackend

HP = PPOSpec(batch_size=2, actor_lr=1e-4, critic_lr=1e-3)
LIVE_KEYS = {
    "actor/logprob_gap_no_replay",
    "actor/routing_flip_fraction",
    "actor/routing_flip_fraction_layers",
    "actor/gap_time_s",
}


@pytest.fixture
def tiny(request):
    def load(*overrides):
        return load_recipe(request.config.rootpath / "recipes" / "tiny-cpu.yaml", list(overrides))

    return load


@pytest.fixture(scope="module")
def sampler(tiny_model_spec):
    from t1_policy import build_model

    return build_model(tiny_model_spec, seed=0)


@pytest.fixture(scope="module")
def batch(sampler, sample_with):
    return [
        sample_with(sampler, prompt_len=30, turns=[(10, 12), (10, 0)], reward=r, seed=i, task_id=f"t{i}")
        for i, r in enumerate([0.2, 0.7])
    ]


def test_live_forward_runs_on_step_one_and_every_kth_only(tiny_model_spec, batch):
    be = TorchBackend(model_spec=tiny_model_spec, ppo_spec=HP, seed=0, logprob_gap_every=2)
    present = [LIVE_KEYS <= set(ppo_step(be, batch, HP)) for _ in range(3)]
    assert present == [True, False, True]  # steps 1 and 3 (0-based 0 and 2); step 2 pays no extra forward


def test_zero_means_never_and_replay_gap_stays_every_step(tiny_model_spec, batch):
    be = TorchBackend(model_spec=tiny_model_spec, ppo_spec=HP, seed=0, logprob_gap_every=0)
    gaps = []
    for _ in range(2):
        m = ppo_step(be, batch, HP)
        assert not LIVE_KEYS & set(m)
        gaps.append(m["actor/logprob_gap_replay"])  # from the training forward itself: free, every step
    assert gaps[0] < 1e-4 and gaps[1] > gaps[0]  # step 2 scores step 1's samples with updated weights


def test_from_spec_reads_the_recipe_cadence(tiny):
    be = TorchBackend.from_spec(tiny("trainer.logprob_gap_every=7"))
    assert be.logprob_gap_every == 7 and [be.gap_due(s) for s in (0, 1, 7, 13, 14)] == [1, 0, 1, 0, 1]
    assert TorchBackend.from_spec(tiny(), gap_without_replay=False).logprob_gap_every == 0
    assert TorchBackend.from_spec(tiny()).logprob_gap_every == 10  # the spec's default


def test_flip_fraction_counts_exactly_the_loss_tokens_whose_record_disagrees(tiny_model_spec, batch, Sample):
    """Live routing ignores the record, so rewriting the record at n loss tokens' rows flips exactly n."""
    be = TorchBackend(model_spec=tiny_model_spec, ppo_spec=HP, seed=0, logprob_gap_every=1)
    clean = be.logprob_gap(batch)
    assert clean["actor/routing_flip_fraction"] == 0.0 and clean["actor/logprob_gap_replay"] < 1e-4
    s = batch[0]
    loss = np.flatnonzero(s.loss_mask)
    tampered_tokens = loss[::3]
    routing = s.routing.copy()
    for j in tampered_tokens:  # layer 0 of the row that scores token j: two experts it did not pick
        routing[j - 1, 0] = [e for e in range(8) if e not in routing[j - 1, 0]][:2]
    m = be.logprob_gap([Sample(**{**vars(s), "routing": routing})])
    assert m["actor/routing_flip_fraction"] == pytest.approx(len(tampered_tokens) / len(loss))
    assert m["actor/routing_flip_fraction_layers"] == pytest.approx(len(tampered_tokens) / (len(loss) * 4))
    assert (
        m["actor/logprob_gap_replay"] > clean["actor/logprob_gap_replay"]
    )  # replay ran the rewritten record
