"""The mismatch split into kernel and version terms (T1 Appendix 12, Eq. 25); numbers worked by hand."""

from __future__ import annotations

import math

import pytest
import torch

from t1_spec import PPOSpec
from t1_trainer.mismatch import mismatch_terms, snapshot, swapped_weights
from t1_trainer.step import ppo_step
from t1_trainer.torch_backend import TorchBackend


def t(*xs: float) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float32)


def test_terms_of_a_fresh_a_stale_and_an_undecomposable_sample():
    # fresh (staleness 0): kernel |-1 + 1.1| + |-2 + 1.8| = 0.3, version 0
    # stale with the behaviour copy: kernel |-0.7 + 1.0| = 0.3, version |-0.5 + 0.7| = 0.2
    # stale without it: 3 tokens not decomposed -> kernel 0.6 / 3, version 0.2 / 3, decomposed 3 of 6
    m = mismatch_terms(
        [
            (t(-1.0, -2.0), None, t(-1.1, -1.8), 0),
            (t(-0.5), t(-0.7), t(-1.0), 1),
            (t(-3.0, -3.0, -3.0), None, t(-1.0, -1.0, -1.0), 1),
        ]
    )
    assert m["actor/mismatch_kernel"] == pytest.approx(0.2, abs=1e-6)
    assert m["actor/mismatch_version"] == pytest.approx(0.2 / 3, abs=1e-6)
    assert m["actor/mismatch_decomposed_fraction"] == 0.5


def test_nothing_decomposable_gives_nan_not_zero():
    m = mismatch_terms([(t(-1.0), None, t(-2.0), 1)])
    assert math.isnan(m["actor/mismatch_kernel"]) and m["actor/mismatch_decomposed_fraction"] == 0.0


def test_swapped_weights_restores_the_model_and_its_parameters():
    model = torch.nn.Linear(3, 2)
    params = list(model.parameters())
    before = snapshot(model)
    other = {k: torch.zeros_like(v) for k, v in before.items()}
    with swapped_weights(model, other):
        assert float(model.weight.detach().abs().sum()) == 0.0
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())
    assert all(a is b for a, b in zip(params, model.parameters(), strict=True))


@pytest.fixture(scope="module")
def batch(tiny_model_spec, sample_with):
    from t1_policy import build_model

    sampler = build_model(tiny_model_spec, seed=0)
    return [
        sample_with(sampler, prompt_len=30, turns=[(10, 8), (6, 0)], reward=r, seed=i, task_id=f"t{i}")
        for i, r in enumerate([0.2, 0.9])
    ]


def _trainer_logprobs(be, samples):
    from t1_r3 import replay_routing

    with torch.no_grad():
        out = []
        for s in samples:
            with replay_routing(be.actor, s.routing):
                out.append(be.actor_logprobs(s))
        return out


def test_staleness_one_splits_into_the_first_steps_kernel_and_the_update(tiny_model_spec, batch):
    spec = PPOSpec(batch_size=2, actor_lr=1e-3, critic_lr=1e-3)
    be = TorchBackend(model_spec=tiny_model_spec, ppo_spec=spec, seed=0, logprob_gap_every=1)
    theta0 = _trainer_logprobs(be, batch)
    first = ppo_step(be, batch, spec)
    # staleness 0: the whole mismatch is kernel numerics, the same figure as the replayed gap
    assert first["actor/mismatch_kernel"] == first["actor/logprob_gap_replay"]
    assert first["actor/mismatch_version"] == 0.0 and first["actor/mismatch_decomposed_fraction"] == 1.0
    be.policy_version = 1  # as publish_weights would
    theta1 = _trainer_logprobs(be, batch)
    second = ppo_step(be, batch, spec, staleness=1)
    # the kernel term is scored with the kept theta_0: the first step's kernel again
    assert second["actor/mismatch_kernel"] == pytest.approx(first["actor/mismatch_kernel"], abs=1e-6)
    # the version term is |log p_theta1 - log p_theta0| over the loss tokens, computed here directly
    n = sum(x.numel() for x in theta0)
    moved = sum(float((a - b).abs().sum()) for a, b in zip(theta1, theta0, strict=True)) / n
    assert moved > 1e-4
    assert second["actor/mismatch_version"] == pytest.approx(moved, rel=1e-4)
    assert second["actor/mismatch_decomposed_fraction"] == 1.0


def test_without_the_gap_measurement_no_copy_is_kept_and_stale_samples_are_not_decomposed(
    tiny_model_spec, batch
):
    spec = PPOSpec(batch_size=2)
    be = TorchBackend(model_spec=tiny_model_spec, ppo_spec=spec, seed=0)
    ppo_step(be, batch, spec)
    assert be.behaviour_weights is None
    be.policy_version = 1
    m = ppo_step(be, batch, spec, staleness=1)
    assert m["actor/mismatch_decomposed_fraction"] == 0.0 and math.isnan(m["actor/mismatch_version"])
