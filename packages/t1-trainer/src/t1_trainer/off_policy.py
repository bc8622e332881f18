"""Importance correction of the train/rollout mismatch, and its registry by ``ppo.off_policy.kind``.

The engine samples with its kernels, the trainer differentiates with its own, and at staleness >= 1 with
newer weights; the log-ratio ``log pi_old^train(y_j) - log pi^rollout(y_j)`` of a loss token is that
mismatch (T1 Appendix 12, Eq. 25: the kernel-numerics term, plus the version term at staleness >= 1).
``pi_old^train`` is the trainer's pre-update log-prob with the sampler's routing replayed (R3, T1 §4.3), the
first forward of the step's actor update. A correction turns the log-ratios into one weight per loss token
that multiplies the token's clipped surrogate (`t1_trainer.algorithms.ppo_policy_loss`); with a correction
on, the ratio's own denominator is ``pi_old^train`` at every staleness (decoupled PPO: the weight carries
the behaviour correction, the clip keeps the trust region around the weights being updated).

- ``none``: no weight; the step's behaviour log-probs are chosen by staleness (`t1_trainer.step`).
- ``tis``: truncated importance sampling, ``w_j = min(r_j, C)`` (Yao et al. 2025).
- ``icepop``: masked importance sampling, ``w_j = 1`` if ``low <= r_j <= high`` else 0 (Ling team 2025).

At ``level: sequence`` the ratio of every loss token of a sample (one TITO chunk) is replaced by the
sample's geometric-mean ratio ``exp(mean_j log r_j)`` over its loss tokens before the cap or the band; see
`t1_spec.TISSpec.level` for why the geometric mean rather than the product.

Pure functions on torch tensors; the weights never carry a gradient.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import torch

from t1_spec import IcePopSpec, NoOffPolicySpec, Registry, TISSpec

__all__ = [
    "OFF_POLICY_CORRECTIONS",
    "MaskedIS",
    "NoCorrection",
    "TruncatedIS",
    "icepop_weights",
    "level_log_ratio",
    "tis_weights",
]

OFF_POLICY_CORRECTIONS = Registry(
    "ppo.off_policy.kind",
    {
        "none": "t1_trainer.off_policy:NoCorrection",
        "tis": "t1_trainer.off_policy:TruncatedIS",
        "icepop": "t1_trainer.off_policy:MaskedIS",
    },
)
"""``ppo.off_policy.kind`` -> the correction class; each has ``active``, ``metric`` and static ``weights``."""

Level = Literal["token", "sequence"]


def level_log_ratio(log_ratio: torch.Tensor, mask: torch.Tensor, level: Level) -> torch.Tensor:
    """The log-ratio each loss token is judged by: its own, or its sample's mean over loss tokens.

    Args:
        log_ratio: float ``[T]``, ``log pi_old^train - log pi^rollout`` per position (nats).
        mask: ``[T]`` 0/1, 1 on loss tokens.
        level: ``token`` or ``sequence``.

    Returns:
        float ``[T]``: ``log_ratio`` (token), or ``mean_j log_ratio_j`` over the loss tokens broadcast to
        every position (sequence; the log of the geometric-mean ratio). 0 at masked positions.

    Raises:
        ValueError: an unknown level, or shapes that differ.
    """
    if log_ratio.shape != mask.shape or log_ratio.dim() != 1:
        raise ValueError(
            f"level_log_ratio needs two [T] tensors of one shape, got {tuple(log_ratio.shape)} and "
            f"{tuple(mask.shape)}"
        )
    m = mask.to(torch.bool)
    lr = log_ratio.detach().float()
    lr = torch.where(m, lr, torch.zeros_like(lr))
    if level == "token":
        return lr
    if level == "sequence":
        n = int(m.sum())
        mean = lr.sum() / n if n else lr.sum()
        return torch.where(m, mean.expand_as(lr), torch.zeros_like(lr))
    raise ValueError(f"ppo.off_policy.level {level!r}: use 'token' or 'sequence'")


def tis_weights(
    log_ratio: torch.Tensor, mask: torch.Tensor, *, cap: float, level: Level = "token"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Truncated importance weights ``w_j = min(r_j, C)`` (Yao et al. 2025; T1 Appendix 12, Eq. 25).

    Args:
        log_ratio: float ``[T]``, ``log pi_old^train - log pi^rollout`` (nats).
        mask: ``[T]`` 0/1 loss mask.
        cap: C >= 1 (ratio).
        level: ``token`` (``r_j`` per token) or ``sequence`` (the sample's geometric-mean ratio).

    Returns:
        ``(weights [T] float32, truncated [T] bool)``: 0 weight and False at masked positions; ``truncated``
        marks the loss tokens whose ratio exceeded C.

    Raises:
        ValueError: ``cap`` < 1 (a cap below 1 would shrink every on-policy token).
    """
    if not cap >= 1:
        raise ValueError(f"ppo.off_policy.cap={cap} must be >= 1")
    lr = level_log_ratio(log_ratio, mask, level)
    m = mask.to(torch.bool)
    ratio = torch.exp(lr)
    truncated = m & (ratio > cap)
    w = torch.where(m, torch.clamp(ratio, max=cap), torch.zeros_like(ratio))
    return w, truncated


def icepop_weights(
    log_ratio: torch.Tensor, mask: torch.Tensor, *, low: float, high: float, level: Level = "token"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked importance weights: 1 inside the band ``[low, high]``, 0 outside (IcePop, Ling team 2025).

    Args:
        log_ratio: float ``[T]``, ``log pi_old^train - log pi^rollout`` (nats).
        mask: ``[T]`` 0/1 loss mask.
        low: lower edge, in (0, 1] (ratio).
        high: upper edge, >= 1 (ratio).
        level: ``token`` or ``sequence`` (a whole sample kept or masked by its geometric-mean ratio).

    Returns:
        ``(weights [T] float32, masked [T] bool)``: weights are exactly 0 or 1 on loss tokens and 0 elsewhere;
        ``masked`` marks the loss tokens outside the band. The edges themselves are kept.

    Raises:
        ValueError: ``low`` not in (0, 1] or ``high`` < 1.
    """
    if not 0 < low <= 1 or not high >= 1:
        raise ValueError(f"ppo.off_policy band [{low}, {high}]: need 0 < low <= 1 <= high")
    lr = level_log_ratio(log_ratio, mask, level)
    m = mask.to(torch.bool)
    # compare in log space: the band's edges are exact there and an overflowing ratio is still masked
    inside = (lr >= math.log(low)) & (lr <= math.log(high))
    masked = m & ~inside
    w = (m & inside).float()
    return w, masked


class NoCorrection:
    """``none``: the PPO loss as T1 runs it, no weight (T1 §4.5)."""

    active: ClassVar[bool] = False
    """False: the step keeps its staleness-chosen behaviour log-probs and passes no weight."""

    metric: ClassVar[str] = ""
    """No metric of its own."""

    @staticmethod
    def weights(
        log_ratio: torch.Tensor, mask: torch.Tensor, spec: NoOffPolicySpec
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """None: no weight (the caller's loss is left exactly as it was)."""
        return None


class TruncatedIS:
    """``tis``: `tis_weights` with the spec's cap and level."""

    active: ClassVar[bool] = True
    """True: the trainer's pre-update log-probs are the ratio's denominator and the weights apply."""

    metric: ClassVar[str] = "actor/off_policy_truncated_fraction"
    """Share of the step's loss tokens whose weight was truncated at the cap."""

    @staticmethod
    def weights(
        log_ratio: torch.Tensor, mask: torch.Tensor, spec: TISSpec
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`tis_weights` (``cap``, ``level`` from ``spec``)."""
        return tis_weights(log_ratio, mask, cap=spec.cap, level=spec.level)


class MaskedIS:
    """``icepop``: `icepop_weights` with the spec's band and level."""

    active: ClassVar[bool] = True
    """True: the trainer's pre-update log-probs are the ratio's denominator and the weights apply."""

    metric: ClassVar[str] = "actor/off_policy_masked_fraction"
    """Share of the step's loss tokens removed from the loss (ratio outside the band)."""

    @staticmethod
    def weights(
        log_ratio: torch.Tensor, mask: torch.Tensor, spec: IcePopSpec
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`icepop_weights` (``low``, ``high``, ``level`` from ``spec``)."""
        return icepop_weights(log_ratio, mask, low=spec.low, high=spec.high, level=spec.level)
