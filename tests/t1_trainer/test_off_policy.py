"""Importance correction of the train/rollout mismatch (TIS, IcePop; T1 Appendix 12, Eq. 25).

Every expected number is worked out by hand in the comments, never by the code under test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from t1_spec import IcePopSpec, PPOSpec, TISSpec
from t1_trainer.algorithms import ppo_policy_loss
from t1_trainer.checks import unbuilt_ppo
from t1_trainer.errors import TrainerConfigError
from t1_trainer.off_policy import (
    OFF_POLICY_CORRECTIONS,
    MaskedIS,
    NoCorrection,
    TruncatedIS,
    icepop_weights,
    tis_weights,
)
from t1_trainer.step import ppo_step
from t1_trainer.torch_backend import TorchBackend


def log_ratios(*ratios: float) -> torch.Tensor:
    return torch.tensor([math.log(r) for r in ratios], dtype=torch.float32)


def test_every_kind_has_an_implementation():
    assert OFF_POLICY_CORRECTIONS.field == "ppo.off_policy.kind"
    assert OFF_POLICY_CORRECTIONS.kinds() == ("none", "tis", "icepop")
    loaded = [OFF_POLICY_CORRECTIONS.load(k) for k in ("none", "tis", "icepop")]
    assert loaded == [NoCorrection, TruncatedIS, MaskedIS]
    assert [c.active for c in loaded] == [False, True, True]


def test_tis_token_caps_each_ratio_at_c():
    # ratios 0.5, 1, 3, 2.5 with the last position masked; C = 2 -> 0.5, 1, 2 (3 truncated), 0
    w, truncated = tis_weights(log_ratios(0.5, 1.0, 3.0, 2.5), torch.tensor([1, 1, 1, 0]), cap=2.0)
    assert w.tolist() == pytest.approx([0.5, 1.0, 2.0, 0.0], abs=1e-6)
    assert truncated.tolist() == [False, False, True, False]


def test_tis_sequence_uses_the_geometric_mean_over_loss_tokens():
    # loss tokens 2 and 8: geometric mean sqrt(16) = 4 (the masked 100 does not count; the product would
    # be 16); C = 5 keeps 4 on both tokens, C = 2 truncates both to 2
    lr, mask = log_ratios(2.0, 100.0, 8.0), torch.tensor([1, 0, 1])
    w, truncated = tis_weights(lr, mask, cap=5.0, level="sequence")
    assert w.tolist() == pytest.approx([4.0, 0.0, 4.0], rel=1e-5) and not truncated.any()
    w, truncated = tis_weights(lr, mask, cap=2.0, level="sequence")
    assert w.tolist() == pytest.approx([2.0, 0.0, 2.0], abs=1e-6)
    assert truncated.tolist() == [True, False, True]


def test_icepop_token_masks_ratios_outside_the_band():
    # band [0.5, 2]: 0.49 and 2.01 fall out, 0.51, 1 and 1.99 stay
    w, masked = icepop_weights(log_ratios(0.49, 0.51, 1.0, 1.99, 2.01), torch.ones(5), low=0.5, high=2.0)
    assert w.tolist() == [0.0, 1.0, 1.0, 1.0, 0.0]
    assert masked.tolist() == [True, False, False, False, True]


def test_icepop_sequence_keeps_or_drops_the_whole_sample():
    # 0.3 and 0.6: geometric mean sqrt(0.18) = 0.424 < 0.5, both tokens masked although 0.6 is inside
    w, masked = icepop_weights(log_ratios(0.3, 0.6), torch.ones(2), low=0.5, high=2.0, level="sequence")
    assert w.tolist() == [0.0, 0.0] and masked.tolist() == [True, True]
    # 0.8 and 1.5: sqrt(1.2) = 1.095, inside: both kept; 3.0 alone (token level) would be masked
    w, masked = icepop_weights(log_ratios(0.8, 3.0), torch.ones(2), low=0.5, high=2.0, level="sequence")
    assert w.tolist() == [1.0, 1.0] and not masked.any()


def test_bad_caps_and_bands_are_refused():
    with pytest.raises(ValueError, match="cap"):
        tis_weights(torch.zeros(2), torch.ones(2), cap=0.5)
    with pytest.raises(ValueError, match="band"):
        icepop_weights(torch.zeros(2), torch.ones(2), low=1.5, high=2.0)
    with pytest.raises(ValueError, match="level"):
        tis_weights(torch.zeros(2), torch.ones(2), cap=2.0, level="trajectory")


def test_weighted_policy_loss_matches_the_hand_computation():
    # ratio 1 everywhere, so min(rA, clip(r)A) = A; A = 1, -2, 3 and w = 0.5, 2, 0 over 3 loss tokens:
    # loss = -(0.5 * 1 + 2 * -2 + 0 * 3) / 3 = 3.5 / 3
    logp = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    adv = torch.tensor([1.0, -2.0, 3.0])
    loss, _ = ppo_policy_loss(
        logp, logp.detach(), adv, torch.ones(3), clip_eps=0.2, is_weights=torch.tensor([0.5, 2.0, 0.0])
    )
    assert float(loss.detach()) == pytest.approx(3.5 / 3, abs=1e-6)
    loss.backward()
    # d/dlogp_j of -w_j r_j A_j / 3 at r = 1: -w_j A_j / 3 = -1/6, 4/3, and exactly 0 for the masked token
    assert logp.grad.tolist() == pytest.approx([-1 / 6, 4 / 3, 0.0], abs=1e-6)
    assert logp.grad[2].item() == 0.0


def test_no_weights_leave_the_loss_bit_identical():
    g = torch.Generator().manual_seed(0)
    logp, old, adv = (torch.randn(64, generator=g) for _ in range(3))
    mask = (torch.rand(64, generator=g) > 0.3).float()
    loss, met = ppo_policy_loss(logp, old, adv, mask, clip_eps=0.2, num_tokens=100.0)
    # the formula as it stood before weights existed, op for op
    ratio = torch.exp(torch.where(mask.bool(), logp, 0.0) - torch.where(mask.bool(), old, 0.0))
    a = torch.where(mask.bool(), adv, 0.0)
    obj = -torch.minimum(ratio * a, torch.clamp(ratio, 0.8, 1.2) * a)
    assert torch.equal(loss, torch.where(mask.bool(), obj, 0.0).sum() / torch.tensor(100.0))


def test_both_trainers_build_a_correction():
    # one update loop (t1_trainer.update) applies it for either backend
    spec = PPOSpec(batch_size=1, off_policy=TISSpec())
    assert unbuilt_ppo(spec, "torch") == [] == unbuilt_ppo(spec, "megatron")


# ---- the torch backend on the tiny model


@pytest.fixture(scope="module")
def sampler(tiny_model_spec):
    from t1_policy import build_model

    return build_model(tiny_model_spec, seed=0)


@pytest.fixture(scope="module")
def batch(sampler, sample_with):
    return [
        sample_with(sampler, prompt_len=30, turns=[(10, 8), (6, 0)], reward=r, seed=i, task_id=f"t{i}")
        for i, r in enumerate([0.2, 0.9])
    ]


def _skewed(batch, factor):
    """The batch with sample 0's rollout log-probs lowered by log(factor): its ratios become ~factor."""
    first = batch[0]
    lps = np.where(first.loss_mask == 1, first.rollout_logprobs - math.log(factor), first.rollout_logprobs)
    skewed = type(first)(**{**vars(first), "rollout_logprobs": lps.astype(np.float32)})
    return [skewed, *batch[1:]]


def _spec(off_policy):
    return PPOSpec(batch_size=2, actor_lr=1e-4, critic_lr=1e-3, off_policy=off_policy)


def test_tis_truncates_exactly_the_skewed_samples_tokens(tiny_model_spec, batch):
    # sample 0's ratio ~3 (kernel gap ~1e-7 aside) > C = 2: all its n0 loss tokens truncated, weight 2;
    # sample 1's ratio ~1: weight ~1. truncated share n0 / (n0 + n1), weight mean (2 n0 + n1) / (n0 + n1)
    spec = _spec(TISSpec(cap=2.0))
    m = ppo_step(TorchBackend(model_spec=tiny_model_spec, ppo_spec=spec, seed=0), _skewed(batch, 3.0), spec)
    n0, n1 = (int(s.loss_mask.sum()) for s in batch)
    assert m["actor/off_policy_truncated_fraction"] == n0 / (n0 + n1)
    assert m["actor/off_policy_weight_mean"] == pytest.approx((2 * n0 + n1) / (n0 + n1), abs=1e-4)


def test_icepop_masking_every_token_leaves_no_gradient(tiny_model_spec, batch):
    # both samples skewed to ratio ~3, outside [0.5, 2]: every token masked, so the actor's gradient is 0
    spec = _spec(IcePopSpec(low=0.5, high=2.0))
    skewed = _skewed(_skewed(batch, 3.0)[::-1], 3.0)
    m = ppo_step(TorchBackend(model_spec=tiny_model_spec, ppo_spec=spec, seed=0), skewed, spec)
    assert m["actor/off_policy_masked_fraction"] == 1.0 and m["actor/off_policy_weight_mean"] == 0.0
    assert m["actor/grad_norm"] == 0.0 and m["actor/policy_loss"] == 0.0


def test_with_a_correction_the_ratio_is_taken_against_the_recomputation_at_staleness_one(
    tiny_model_spec, batch
):
    # at staleness 1 without a correction the ratio's denominator is the rollout's (ratio ~3 on sample 0);
    # with one it is the trainer's recomputation, so pass 1's ratio is exactly 1 and the weight carries the 3
    spec = _spec(TISSpec(cap=10.0))
    be = TorchBackend(model_spec=tiny_model_spec, ppo_spec=spec, seed=0)
    be.policy_version = 1
    m = ppo_step(be, _skewed(batch, 3.0), spec, staleness=1)
    assert m["actor/ratio_min"] == m["actor/ratio_max"] == 1.0
    n0, n1 = (int(s.loss_mask.sum()) for s in batch)
    assert m["actor/off_policy_weight_mean"] == pytest.approx((3 * n0 + n1) / (n0 + n1), abs=1e-4)
    with pytest.raises(TrainerConfigError, match="old_logprobs 'rollout'"):
        be.update_actor(
            batch, [np.zeros(len(s.loss_mask), np.float32) for s in batch], old_logprobs="rollout"
        )
