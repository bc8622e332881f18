"""PPO math for T1: GAE, clipped policy loss, clipped value loss, explained variance, GRPO advantages.

Pure functions on torch tensors, one per equation of the paper (T1 §4.5; the equations are restated in the
structured summary `002_*.txt`, "Critic Warm-Up and PPO Configuration"). No I/O, no model.

Conventions shared by every function:
- A sample is one token stream of length T; position j holds token j.
- ``mask`` / ``loss_mask`` is 1 on sampled tokens (they carry loss) and 0 on prompt, observations and template
  glue (masked context), as the TITO sample defines it.
- "token-mean" is the sum over loss tokens divided by a token count; by default the count of loss tokens
  in the tensors given, or ``num_tokens`` when the caller accumulates micro-batches and wants the mean over
  the whole mini-batch (so the loss does not depend on how the batch is split).
- Masked positions are selected out (``torch.where``) before any arithmetic, never multiplied by 0: a NaN or
  inf there would otherwise reach the gradient as ``0 * nan``, even with the loss itself finite.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from t1_trainer.errors import SampleError

__all__ = [
    "explained_variance",
    "explained_variances",
    "gae",
    "grpo_advantages",
    "masked_mean",
    "ppo_policy_loss",
    "value_loss",
]


def masked_mean(x: torch.Tensor, mask: torch.Tensor, num_tokens: float | None = None) -> torch.Tensor:
    """Token-mean of ``x`` over positions where ``mask`` is 1.

    Args:
        x: values, any shape.
        mask: same shape as ``x``; 1 on loss tokens, 0 elsewhere (any numeric or bool dtype).
        num_tokens: denominator; defaults to ``mask.sum()``. Pass the mini-batch's loss-token count when
            accumulating gradients over micro-batches.

    Returns:
        Scalar tensor. 0 when there is no loss token (and ``num_tokens`` is not given).
    """
    m = mask.to(x.dtype)
    denom = m.sum() if num_tokens is None else torch.as_tensor(float(num_tokens), dtype=x.dtype)
    # where() rather than x * m so that a NaN or inf at a masked position cannot poison the sum.
    total = _on_loss_tokens(x, mask).sum()
    return total / denom.clamp_min(1.0)


def _on_loss_tokens(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``x`` where ``mask`` is nonzero, else 0: selected, so the gradient at masked positions is exactly 0."""
    return torch.where(mask.to(torch.bool), x, torch.zeros_like(x))


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation over one token stream, skipping masked positions (T1 §4.5).

    T1 Eq. (PPO, in `002_*.txt`): ``A_j = sum_{n>=0} (gamma*lam)^n delta_{j+n}`` with
    ``delta_j = r_j + gamma V_old(s_{j+1}) - V_old(s_j)``, and returns ``R_j = A_j + V_old(s_j)``.

    The recursion runs only over loss tokens: at a position with ``loss_mask`` 0 (observation, template
    glue, prompt) the next-state value and the running GAE are carried over unchanged, so tool output adds
    no TD error, no value and no ``gamma*lam`` decay (the observation-skipping variant of verl, PR #2337).
    The step after the last loss token is terminal (``V = 0``).

    With ``gamma = lam = 1`` and one terminal reward ``R`` on the last sampled token, the TD errors telescope
    and every variant (skipping or not) reduces to ``A_j = R - V(s_j)`` and ``R_j = R`` at every loss token;
    this is T1's setting, where the critic is a Monte-Carlo regressor onto the outcome.

    Args:
        rewards: ``[T]`` float, per-token reward (T1: one scalar on the last sampled token, 0 elsewhere).
        values: ``[T]`` float, the pre-update critic's ``V_old(s_j)`` (T1 appendix: anchored to
            ``V_{phi_{t-1}}``). Values at masked positions are ignored.
        loss_mask: ``[T]`` 0/1, 1 on sampled tokens.
        gamma: discount (T1: 1.0).
        lam: GAE lambda (T1: 1.0).

    Returns:
        ``(advantages [T], returns [T])`` in float32 (float64 if the inputs are float64); both are 0 at masked
        positions.

    Raises:
        SampleError: on mismatched lengths, or a nonzero reward on a masked position (the skipping recursion
            would drop it silently; the reward belongs on the last sampled token).
    """
    if not (rewards.shape == values.shape == loss_mask.shape) or rewards.dim() != 1:
        raise SampleError(
            f"gae needs three [T] streams of equal length, got rewards {tuple(rewards.shape)}, "
            f"values {tuple(values.shape)}, loss_mask {tuple(loss_mask.shape)}"
        )
    mask = loss_mask.to(torch.bool)
    dropped = (rewards != 0) & ~mask
    if bool(dropped.any()):
        where = torch.nonzero(dropped).flatten().tolist()[:5]
        raise SampleError(
            f"reward on masked position(s) {where}: the GAE recursion skips masked tokens and would drop it; "
            "put the reward on the last sampled token (loss_mask 1)"
        )
    dtype = torch.float64 if values.dtype == torch.float64 else torch.float32
    r = rewards.detach().to("cpu", dtype).tolist()
    v = values.detach().to("cpu", dtype).tolist()
    m = mask.cpu().tolist()
    adv = [0.0] * len(r)
    next_value = 0.0  # terminal: no bootstrap after the last loss token
    running = 0.0
    for j in range(len(r) - 1, -1, -1):
        if not m[j]:
            continue  # carry next_value and running over masked context
        delta = r[j] + gamma * next_value - v[j]
        running = delta + gamma * lam * running
        adv[j] = running
        next_value = v[j]
    advantages = torch.tensor(adv, dtype=dtype)
    v_old = values.detach().to("cpu", dtype)
    returns = torch.where(mask.cpu(), advantages + v_old, torch.zeros_like(advantages))
    return advantages.to(values.device), returns.to(values.device)


def ppo_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_eps: float,
    num_tokens: float | None = None,
    is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped surrogate policy loss, token-mean over loss tokens (T1 §4.5, ``L_pi`` in `002_*.txt`).

    ``L_pi = -E_j[min(rho_j A_j, clip(rho_j, 1-eps, 1+eps) A_j)]`` with ``rho_j = exp(logp_j - old_logp_j)``.
    No dual clip, no KL term, no entropy bonus (T1: KL penalties disabled). With ``is_weights`` ``w_j`` (an
    off-policy correction, `t1_trainer.off_policy`), each token's term is ``w_j * min(...)``; a token of
    weight 0 is selected out (gradient exactly 0) but still counts in the token-mean's denominator.

    Args:
        logp: ``[T]`` float, log-probs of the sampled tokens under the current actor (carries the gradient).
        old_logp: ``[T]`` float, log-probs under the behaviour policy ``pi_old`` that drew the tokens (no
            gradient): the trainer's recomputation with its pre-update weights at staleness 0, the rollout's
            log-probs at staleness >= 1 (T1 Appendix 12; `t1_trainer.step`).
        advantages: ``[T]`` float, unnormalized (T1 §5.2).
        mask: ``[T]`` 0/1 loss mask.
        clip_eps: epsilon (T1: 0.2).
        num_tokens: token-mean denominator (see module doc); defaults to the loss tokens here.
        is_weights: ``[T]`` float >= 0, importance weights (no gradient); None = none, the loss computed
            exactly as without the argument.

    Returns:
        ``(loss, metrics)``; metrics (floats, over loss tokens): ``clip_fraction`` (share of tokens where the
        clipped branch is the one taken and differs), ``approx_kl`` (``E[old_logp - logp]``, k1),
        ``approx_kl_k3`` (``E[rho - 1 - log rho]``), ``ratio_mean``, ``ratio_min``, ``ratio_max``.
    """
    # the streams' masked positions (prompt, observations) may hold anything, NaN included: select them out
    logp = _on_loss_tokens(logp, mask)
    old_logp = _on_loss_tokens(old_logp.detach(), mask)
    advantages = _on_loss_tokens(advantages.detach(), mask)
    log_ratio = logp - old_logp
    ratio = torch.exp(log_ratio)
    surr = ratio * advantages
    surr_clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    objective = -torch.minimum(surr, surr_clipped)
    if is_weights is not None:
        w = is_weights.detach().to(objective.dtype)
        objective = torch.where(w > 0, w * objective, torch.zeros_like(objective))
    loss = masked_mean(objective, mask, num_tokens)
    with torch.no_grad():
        m = mask.to(torch.bool)
        n = int(m.sum())
        r = ratio[m]
        metrics = {
            "clip_fraction": float((surr_clipped < surr)[m].float().mean()) if n else 0.0,
            "approx_kl": float((-log_ratio)[m].mean()) if n else 0.0,
            "approx_kl_k3": float((r - 1.0 - log_ratio[m]).mean()) if n else 0.0,
            "ratio_mean": float(r.mean()) if n else 1.0,
            "ratio_min": float(r.min()) if n else 1.0,
            "ratio_max": float(r.max()) if n else 1.0,
        }
    return loss, metrics


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    *,
    value_clip: float,
    num_tokens: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped value loss around the pre-update critic, token-mean (T1 §4.5, ``L_V`` in `002_*.txt`).

    ``L_V = E_j[max((V_phi(s_j) - R_j)^2, (V_clip(s_j) - R_j)^2)]`` with
    ``V_clip = V_old + clip(V_phi - V_old, -eps_v, eps_v)``. The clip is anchored to the PRE-update
    values ``V_{phi_{t-1}}`` (T1 appendix on the critic's version axis), the same ones that anchored GAE, so
    it is a trust region around a fixed function. No 0.5 factor (the paper's ``L_V`` has none).

    Args:
        values: ``[T]`` float, current critic predictions (carries the gradient).
        old_values: ``[T]`` float, pre-update critic values (no gradient).
        returns: ``[T]`` float, GAE returns.
        mask: ``[T]`` 0/1 loss mask.
        value_clip: ``eps_v`` (T1: 0.2).
        num_tokens: token-mean denominator (see module doc).

    Returns:
        ``(loss, metrics)``; metrics: ``value_clip_fraction`` (share of loss tokens where the clipped error
        is the larger), ``value_mean``, ``return_mean``.
    """
    values = _on_loss_tokens(values, mask)  # masked positions may hold anything, NaN included
    old_values = _on_loss_tokens(old_values.detach(), mask)
    returns = _on_loss_tokens(returns.detach(), mask)
    clipped = old_values + torch.clamp(values - old_values, -value_clip, value_clip)
    err = (values - returns) ** 2
    err_clipped = (clipped - returns) ** 2
    loss = masked_mean(torch.maximum(err, err_clipped), mask, num_tokens)
    with torch.no_grad():
        m = mask.to(torch.bool)
        n = int(m.sum())
        metrics = {
            "value_clip_fraction": float((err_clipped > err)[m].float().mean()) if n else 0.0,
            "value_mean": float(values[m].mean()) if n else 0.0,
            "return_mean": float(returns[m].mean()) if n else 0.0,
        }
    return loss, metrics


_EV_RELATIVE_FLOOR = 1e-10
"""Var(R) below this fraction of mean(R^2) counts as constant returns (float32 rounding, not signal)."""


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """Critic explained variance ``1 - Var(R - V) / Var(R)`` over loss tokens (T1 §4.5, paper Eq. 19).

    The definition is verl's ``critic/vf_explained_var``: token-flattened over every loss token of the batch,
    with the pre-update values and the (unnormalized) returns. 1 for a perfect critic, 0 for one that predicts
    the mean return, negative for one worse than the mean (T1 reports -33.6 for a cold critic). Variances are
    population variances (the ratio does not depend on the choice).

    Args:
        values: ``[N]`` (or any shape, flattened together with the others), pre-update critic values.
        returns: same shape, GAE returns.
        mask: same shape, 0/1 loss mask.

    Returns:
        EV as a float; ``nan`` when the returns have no variance over the loss tokens (for example every
        reward in the batch is equal), where EV is undefined. "No variance" is relative to the returns' scale:
        float32 returns of one constant reward carry rounding noise of ~1e-18, which must not be divided by.
    """
    m = mask.reshape(-1).to(torch.bool)
    v = values.reshape(-1)[m].to(torch.float64)
    r = returns.reshape(-1)[m].to(torch.float64)
    if r.numel() == 0:
        return float("nan")
    var_r = torch.mean((r - r.mean()) ** 2)
    if float(var_r) <= _EV_RELATIVE_FLOOR * float(torch.mean(r**2)) or float(var_r) == 0.0:
        return float("nan")
    resid = r - v
    var_resid = torch.mean((resid - resid.mean()) ** 2)
    return float(1.0 - var_resid / var_r)


def explained_variances(
    samples: Sequence[Any], values: Sequence[np.ndarray], returns: Sequence[np.ndarray]
) -> tuple[float, float]:
    """Explained variance (T1 Eq. 19) per token and per trajectory of one batch, for one set of values.

    Per token: `explained_variance` over every loss token of the batch (verl's ``vf_explained_var``). Per
    trajectory: one point per trial, the value and the return at the first loss token of the trial's first
    chunk, i.e. the critic's prediction ``V(s_0)`` of the whole trajectory's outcome against that outcome
    (with ``gamma = lam = 1`` the return there is the trajectory's reward, T1 §4.5). A trial split into
    several TITO chunks, or compacted, still counts once, so long trajectories do not weigh more than short
    ones, which they do per token. Figure 7 of the paper reports one EV per step without saying which; both
    are kept.

    Args:
        samples: the batch; each has ``loss_mask`` ``[T]``, ``trial_id`` and ``chunk_index``.
        values: float ``[T]`` per sample, the critic's values (pre- or post-update).
        returns: float ``[T]`` per sample, the GAE returns (0 at masked positions).

    Returns:
        ``(ev_token, ev_trajectory)``; each is ``nan`` where undefined (returns without variance, or fewer
        than two trials for the trajectory value).

    Raises:
        ValueError: the three sequences differ in length.
    """
    if not len(samples) == len(values) == len(returns):
        raise ValueError(
            f"explained_variances needs one values and one returns array per sample, got {len(samples)} "
            f"samples, {len(values)} values, {len(returns)} returns"
        )
    masks = [np.asarray(s.loss_mask).astype(bool) for s in samples]
    v_tok = np.concatenate([np.asarray(v)[m] for v, m in zip(values, masks, strict=True)])
    r_tok = np.concatenate([np.asarray(r)[m] for r, m in zip(returns, masks, strict=True)])
    ev_token = explained_variance(torch.as_tensor(v_tok), torch.as_tensor(r_tok), torch.ones(v_tok.shape[0]))
    first: dict[str, tuple[int, float, float]] = {}  # trial -> (chunk, V(s_0), R_0)
    for s, v, r, m in zip(samples, values, returns, masks, strict=True):
        pos = np.flatnonzero(m)
        chunk = int(getattr(s, "chunk_index", 0))
        key = str(s.trial_id)
        if pos.size and (key not in first or chunk < first[key][0]):
            first[key] = (chunk, float(np.asarray(v)[pos[0]]), float(np.asarray(r)[pos[0]]))
    if len(first) < 2:
        return ev_token, float("nan")
    v_traj = torch.tensor([f[1] for f in first.values()], dtype=torch.float64)
    r_traj = torch.tensor([f[2] for f in first.values()], dtype=torch.float64)
    return ev_token, explained_variance(v_traj, r_traj, torch.ones(len(first)))


def grpo_advantages(
    group_rewards: Sequence[Sequence[float]] | Sequence[np.ndarray],
    *,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> list[np.ndarray]:
    """Group-relative advantages, one scalar per trajectory (GRPO; kept only for the ``grpo`` ablation).

    ``A_i = (r_i - mean(r_group)) / (std(r_group) + eps)`` (population std), or without the division when
    ``normalize_std`` is false. Every loss token of trajectory ``i`` receives ``A_i``.

    T1 does not use this estimator (T1 §9: GRPO on T1-15k under the same harness stayed flat; with one sample
    per task there is no group, and T1 §5.2 keeps the critic as the only baseline). A group of one, and any
    group whose rewards are all equal (all fail or all succeed, the long-horizon case T1 §9 names), gets
    advantage exactly 0: such a group contributes no gradient.

    Args:
        group_rewards: per group, the scalar rewards of its trajectories.
        normalize_std: divide by the group's standard deviation.
        eps: added to the standard deviation.

    Returns:
        Per group, a float64 array of advantages in the input order.
    """
    out: list[np.ndarray] = []
    for group in group_rewards:
        r = np.asarray(group, dtype=np.float64)
        if r.size == 0 or bool(np.all(r == r[0])):
            # identical rewards: exactly 0, not the rounding of r - mean(r) divided by eps (T1 §9)
            out.append(np.zeros_like(r))
            continue
        a = r - r.mean()
        if normalize_std:
            a = a / (r.std() + eps)
        out.append(a)
    return out
