"""PPO math against independent computations (T1 §4.5, `002_*.txt` equations)."""

import math

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from t1_spec import PPOSpec
from t1_trainer.algorithms import (
    explained_variance,
    gae,
    grpo_advantages,
    ppo_policy_loss,
    value_loss,
)
from t1_trainer.checks import unbuilt_ppo
from t1_trainer.errors import SampleError, TrainerConfigError
from t1_trainer.torch_backend import TorchBackend


def _gae_by_definition(r, v, m, gamma, lam):
    """A_j = sum_n (gamma lam)^n delta_{j+n} over the loss tokens only, written as an explicit double sum."""
    idx = [j for j in range(len(r)) if m[j]]
    rr = [r[j] for j in idx]
    vv = [v[j] for j in idx] + [0.0]  # terminal value 0 after the last loss token
    deltas = [rr[i] + gamma * vv[i + 1] - vv[i] for i in range(len(idx))]
    adv = [0.0] * len(r)
    ret = [0.0] * len(r)
    for i, j in enumerate(idx):
        adv[j] = sum((gamma * lam) ** n * deltas[i + n] for n in range(len(idx) - i))
        ret[j] = adv[j] + v[j]
    return adv, ret


def test_gae_hand_example_two_loss_tokens():
    # tokens: [prompt, a0, obs, a1]; reward 1 on a1; gamma 0.5, lam 0.5
    r = torch.tensor([0.0, 0.0, 0.0, 1.0])
    v = torch.tensor([9.0, 0.2, 7.0, 0.6])
    m = torch.tensor([0, 1, 0, 1])
    adv, ret = gae(r, v, m, gamma=0.5, lam=0.5)
    d1 = 1.0 + 0.5 * 0.0 - 0.6  # 0.4
    d0 = 0.0 + 0.5 * 0.6 - 0.2  # 0.1, next value skips the observation's 7.0
    assert adv[3].item() == pytest.approx(d1)
    assert adv[1].item() == pytest.approx(d0 + 0.25 * d1)
    assert ret[1].item() == pytest.approx(d0 + 0.25 * d1 + 0.2)
    assert adv[0].item() == 0.0 and adv[2].item() == 0.0 and ret[2].item() == 0.0


@pytest.mark.parametrize("gamma,lam", [(0.9, 0.8), (1.0, 0.95), (0.99, 1.0)])
def test_gae_skips_observations_like_the_definition(gamma, lam):
    g = torch.Generator().manual_seed(0)
    T = 40
    m = (torch.rand(T, generator=g) > 0.4).to(torch.int8)
    m[-1] = 1
    r = torch.zeros(T)
    r[m.bool()] = torch.randn(int(m.sum()), generator=g)
    v = torch.randn(T, generator=g)
    adv, ret = gae(r, v, m, gamma=gamma, lam=lam)
    exp_adv, exp_ret = _gae_by_definition(r.tolist(), v.tolist(), m.tolist(), gamma, lam)
    assert adv.tolist() == pytest.approx(exp_adv, abs=1e-5)
    assert ret.tolist() == pytest.approx(exp_ret, abs=1e-5)


def test_gamma_lambda_one_reduces_to_outcome_minus_value():
    # T1: gamma = lam = 1, one terminal reward R on the last sampled token => A_j = R - V(s_j), returns = R
    T = 30
    g = torch.Generator().manual_seed(1)
    m = torch.tensor([0] * 5 + [1] * 6 + [0] * 7 + [1] * 9 + [0] * 3, dtype=torch.int8)
    assert m.numel() == T
    last = int(torch.nonzero(m).max())
    R = 0.35
    r = torch.zeros(T)
    r[last] = R
    v = torch.randn(T, generator=g)
    adv, ret = gae(r, v, m, gamma=1.0, lam=1.0)
    for j in range(T):
        if m[j]:
            assert adv[j].item() == pytest.approx(R - v[j].item(), abs=1e-6)
            assert ret[j].item() == pytest.approx(R, abs=1e-6)


def test_reward_on_masked_token_is_refused_not_dropped():
    r = torch.tensor([0.0, 0.0, 1.0])
    with pytest.raises(SampleError, match="masked position"):
        gae(r, torch.zeros(3), torch.tensor([0, 1, 0]), gamma=1.0, lam=1.0)


def test_value_clip_is_anchored_to_pre_update_values():
    old = torch.tensor([0.0, 0.0, 0.0])
    ret = torch.tensor([1.0, 1.0, -1.0])
    mask = torch.tensor([1, 1, 1])
    v = torch.tensor([0.5, 0.1, 0.5], requires_grad=True)
    loss, metrics = value_loss(v, old, ret, mask, value_clip=0.2)
    # token 0: unclipped (0.5-1)^2=0.25, clipped to 0.2: (0.2-1)^2=0.64 -> 0.64
    # token 1: inside the clip: (0.1-1)^2=0.81
    # token 2: unclipped (0.5+1)^2=2.25, clipped 0.2: (0.2+1)^2=1.44 -> 2.25
    assert loss.item() == pytest.approx((0.64 + 0.81 + 2.25) / 3)
    assert metrics["value_clip_fraction"] == pytest.approx(1 / 3)
    loss.backward()
    # token 0's max is the clipped branch: no gradient flows to v[0]
    assert v.grad[0].item() == 0.0
    assert v.grad[1].item() == pytest.approx(2 * (0.1 - 1) / 3)


def test_value_loss_clip_uses_old_values_not_zero():
    # the same prediction is clipped or not depending on the anchor
    ret = torch.tensor([1.0])
    mask = torch.tensor([1])
    v = torch.tensor([0.9])
    near, _ = value_loss(v, torch.tensor([0.8]), ret, mask, value_clip=0.2)
    far, _ = value_loss(v, torch.tensor([0.0]), ret, mask, value_clip=0.2)
    assert near.item() == pytest.approx(0.01)
    assert far.item() == pytest.approx(0.64)


def test_clipped_surrogate_matches_hand_values():
    old = torch.zeros(4)
    ratios = torch.tensor([1.5, 0.5, 1.1, 0.5])
    adv = torch.tensor([1.0, 1.0, -2.0, -1.0])
    logp = torch.log(ratios).requires_grad_(True)
    mask = torch.tensor([1, 1, 1, 1])
    loss, metrics = ppo_policy_loss(logp, old, adv, mask, clip_eps=0.2)
    # per token -min(r A, clip(r) A): 1.5,A=1 -> -1.2 ; 0.5,A=1 -> -0.5 ; 1.1,A=-2 -> 2.2 ; 0.5,A=-1 -> 0.8
    assert loss.item() == pytest.approx((-1.2 - 0.5 + 2.2 + 0.8) / 4)
    assert metrics["clip_fraction"] == pytest.approx(2 / 4)  # tokens 0 and 3 take the clipped branch
    assert metrics["approx_kl"] == pytest.approx(-float(torch.log(ratios).mean()))
    assert metrics["ratio_max"] == pytest.approx(1.5)
    loss.backward()
    assert logp.grad[0].item() == 0.0 and logp.grad[3].item() == 0.0
    assert logp.grad[1].item() == pytest.approx(-0.5 * 1.0 / 4)


def test_masked_tokens_carry_no_loss_even_if_nan():
    logp = torch.tensor([float("nan"), 0.0], requires_grad=True)
    old = torch.tensor([float("nan"), 0.0])
    loss, _ = ppo_policy_loss(logp, old, torch.tensor([5.0, 1.0]), torch.tensor([0, 1]), clip_eps=0.2)
    assert loss.item() == pytest.approx(-1.0)


NAN, INF = float("nan"), float("inf")
LOSS_MASK = torch.tensor([0, 1, 0, 1, 1, 0])  # prompt, a, observation, a, a, glue


def _masked_junk(x: torch.Tensor, junk: float) -> torch.Tensor:
    """``x`` with ``junk`` at the masked positions of `LOSS_MASK`."""
    return torch.where(LOSS_MASK.bool(), x, torch.full_like(x, junk))


@pytest.mark.parametrize("junk", [NAN, INF, -INF])
def test_nan_or_inf_at_masked_positions_leaves_the_policy_gradient_as_zeros_there(junk):
    logp0 = torch.tensor([0.0, -0.3, 0.0, -1.2, -0.7, 0.0])
    old0 = torch.tensor([0.0, -0.5, 0.0, -1.0, -0.1, 0.0])
    adv0 = torch.tensor([0.0, 1.5, 0.0, -2.0, 0.4, 0.0])
    grads, losses = [], []
    for fill in (0.0, junk):
        logp = _masked_junk(logp0, fill).requires_grad_()
        loss, _ = ppo_policy_loss(
            logp, _masked_junk(old0, fill), _masked_junk(adv0, fill), LOSS_MASK, clip_eps=0.2
        )
        loss.backward()
        grads.append(logp.grad)
        losses.append(loss.item())
    assert torch.isfinite(grads[1]).all(), grads[1]
    assert torch.equal(grads[1], grads[0]) and losses[1] == losses[0]
    assert not grads[0][~LOSS_MASK.bool()].any()


@pytest.mark.parametrize("junk", [NAN, INF, -INF])
def test_nan_or_inf_at_masked_positions_leaves_the_value_gradient_as_zeros_there(junk):
    v0 = torch.tensor([0.1, 0.4, -0.2, 0.3, 0.9, 0.5])
    old0 = torch.tensor([0.0, 0.2, 0.0, 0.5, 0.7, 0.0])
    ret0 = torch.tensor([0.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    grads, losses = [], []
    for fill in (0.0, junk):
        values = _masked_junk(v0, fill).requires_grad_()
        loss, metrics = value_loss(
            values, _masked_junk(old0, fill), _masked_junk(ret0, fill), LOSS_MASK, value_clip=0.2
        )
        loss.backward()
        grads.append(values.grad)
        losses.append(loss.item())
        assert all(math.isfinite(x) for x in metrics.values())
    assert torch.isfinite(grads[1]).all(), grads[1]
    assert torch.equal(grads[1], grads[0]) and losses[1] == losses[0]
    assert not grads[0][~LOSS_MASK.bool()].any()


def test_token_mean_over_minibatch_does_not_depend_on_split():
    g = torch.Generator().manual_seed(3)
    v = [torch.randn(n, generator=g) for n in (3, 7)]
    old = [torch.randn(n, generator=g) for n in (3, 7)]
    ret = [torch.randn(n, generator=g) for n in (3, 7)]
    msk = [torch.ones(3), torch.tensor([1, 0, 1, 1, 0, 1, 1.0])]
    whole, _ = value_loss(torch.cat(v), torch.cat(old), torch.cat(ret), torch.cat(msk), value_clip=0.2)
    n = float(sum(m.sum() for m in msk))
    parts = sum(value_loss(v[i], old[i], ret[i], msk[i], value_clip=0.2, num_tokens=n)[0] for i in range(2))
    assert parts.item() == pytest.approx(whole.item())


def test_explained_variance_perfect_mean_and_worse():
    ret = torch.tensor([0.0, 1.0, 2.0, 3.0, 100.0])
    mask = torch.tensor([1, 1, 1, 1, 0])
    assert explained_variance(ret.clone(), ret, mask) == pytest.approx(1.0)
    assert explained_variance(torch.full((5,), 1.5), ret, mask) == pytest.approx(0.0)
    # V = 3 - R: residual 2R - 3 has variance 4 Var(R) -> EV = -3
    assert explained_variance(3.0 - ret, ret, mask) == pytest.approx(-3.0)
    assert math.isnan(explained_variance(torch.zeros(3), torch.zeros(3), torch.ones(3)))


def test_explained_variance_is_undefined_for_one_constant_float32_reward():
    # all admitted trials scored 0.05: float32 returns differ only by rounding, EV must not explode
    ret = torch.full((400,), 0.05, dtype=torch.float32)
    ret[::7] = torch.nextafter(torch.tensor(0.05), torch.tensor(1.0))
    values = torch.linspace(-0.1, 0.1, 400)
    assert math.isnan(explained_variance(values, ret, torch.ones(400)))
    # a real (small) spread of returns is still measured
    ret[::2] = 0.10
    assert not math.isnan(explained_variance(values, ret, torch.ones(400)))


def test_grpo_group_of_one_has_no_signal():
    a = grpo_advantages([[1.0, 0.0, 0.0, 1.0], [0.7]])
    assert a[0] == pytest.approx(np.array([1.0, -1.0, -1.0, 1.0]), abs=1e-5)
    assert a[1] == pytest.approx(np.array([0.0]))
    assert grpo_advantages([[2.0, 0.0]], normalize_std=False)[0] == pytest.approx(np.array([1.0, -1.0]))


def test_paper_defaults():
    hp = PPOSpec(batch_size=2)
    assert (hp.advantage.gamma, hp.advantage.lam, hp.clip_eps, hp.value_clip) == (1.0, 1.0, 0.2, 0.2)
    assert (hp.actor_lr, hp.critic_lr, hp.adam_betas, hp.weight_decay) == (1.0e-6, 1.5e-5, (0.9, 0.98), 0.1)
    assert hp.kl_coef == 0 and hp.load_balancing_coef == 0 and not hp.normalize_advantages
    assert unbuilt_ppo(hp) == []  # the torch backend builds everything the paper's settings need


@pytest.mark.parametrize("field", ["kl_coef", "load_balancing_coef"])
def test_kl_or_load_balancing_with_replay_is_refused(field):
    # the paper's rule lives in the spec (T1 §4.3): R3 on => both coefficients 0
    with pytest.raises(ValidationError, match="routing_replay"):
        PPOSpec(batch_size=2, routing_replay=True, **{field: 0.01})


def test_advantage_normalization_is_refused(tiny_model_spec):
    with pytest.raises(TrainerConfigError, match="§5.2"):
        TorchBackend(
            model_spec=tiny_model_spec, ppo_spec=PPOSpec(batch_size=2, normalize_advantages=True), seed=0
        )
