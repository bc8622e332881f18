"""Advantage estimators over a batch of samples, and their registry by ``ppo.advantage.estimator``.

Each estimator turns the batch's rewards (and, for GAE, the pre-update critic values) into per-sample
advantages and returns, float32 ``[T]`` each and 0 at masked positions; advantages are never normalized
(T1 §5.2). `compute_advantages` picks the estimator from `ADVANTAGE_ESTIMATORS` with the spec's
``advantage.estimator``; the per-stream math is in `t1_trainer.algorithms`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np
import torch

from t1_spec import GAEAdvantageSpec, GRPOAdvantageSpec, PPOSpec, Registry
from t1_trainer.algorithms import gae, grpo_advantages
from t1_trainer.samples import TrainSample, reward_stream

__all__ = ["ADVANTAGE_ESTIMATORS", "GAEEstimator", "GRPOEstimator", "compute_advantages"]

ADVANTAGE_ESTIMATORS = Registry(
    "ppo.advantage.estimator",
    {"gae": "t1_trainer.advantages:GAEEstimator", "grpo": "t1_trainer.advantages:GRPOEstimator"},
)
"""``ppo.advantage.estimator`` -> the estimator class; each has ``uses_critic`` and a static ``compute``."""

Streams = tuple[list[np.ndarray], list[np.ndarray]]
"""``(advantages, returns)``: per sample, float32 ``[T]`` each, 0 at masked positions."""


class GAEEstimator:
    """Generalized advantage estimation against the pre-update critic (T1 §4.5), the paper's estimator."""

    uses_critic: ClassVar[bool] = True
    """GAE bootstraps from the critic's values, so the step computes them and updates the critic."""

    @staticmethod
    def compute(
        samples: Sequence[TrainSample], values: Sequence[np.ndarray] | None, spec: GAEAdvantageSpec
    ) -> Streams:
        """Per-sample GAE advantages and returns (`t1_trainer.algorithms.gae`, the spec's gamma and lambda).

        Args:
            samples: the batch.
            values: the pre-update critic values, float ``[T]`` per sample (`TrainerBackend.values`).
            spec: the GAE section of the recipe's PPO spec.

        Returns:
            `Streams`; with ``gamma = lam = 1`` and one terminal reward R, ``A_j = R - V(s_j)`` and
            ``R_j = R`` on every loss token.

        Raises:
            ValueError: ``values`` is None.
            SampleError: from `gae` (mismatched lengths, a reward on a masked position).
        """
        if values is None:
            raise ValueError("gae needs the pre-update critic values")
        advs: list[np.ndarray] = []
        rets: list[np.ndarray] = []
        for s, v in zip(samples, values, strict=True):
            mask = torch.as_tensor(np.asarray(s.loss_mask))
            a, r = gae(reward_stream(s), torch.as_tensor(v), mask, gamma=spec.gamma, lam=spec.lam)
            advs.append(a.numpy().astype(np.float32))
            rets.append(r.numpy().astype(np.float32))
        return advs, rets


class GRPOEstimator:
    """Group-relative advantages without a critic: the baseline T1 §9 rejected, kept for the ablation."""

    uses_critic: ClassVar[bool] = False
    """GRPO trains no critic, so the step neither computes values nor updates the critic."""

    @staticmethod
    def compute(
        samples: Sequence[TrainSample], values: Sequence[np.ndarray] | None, spec: GRPOAdvantageSpec
    ) -> Streams:
        """Every loss token of a sample gets its group's relative advantage (`grpo_advantages`).

        Groups are formed by ``task_id``; a group of one gets advantage 0 (no signal, T1 §9). Returns are the
        rewards on loss tokens (unused: GRPO trains no critic).

        Args:
            samples: the batch.
            values: ignored (GRPO has no critic).
            spec: the GRPO section of the recipe's PPO spec (``group_size`` is the spec's rule; groups are
                the samples that share a task).

        Returns:
            `Streams`.
        """
        groups: dict[str, list[int]] = {}
        for i, s in enumerate(samples):
            groups.setdefault(str(s.task_id), []).append(i)
        per_sample = np.zeros(len(samples))
        group_adv = grpo_advantages([[samples[i].reward for i in g] for g in groups.values()])
        for idx, a in zip(groups.values(), group_adv, strict=True):
            per_sample[idx] = a
        advs: list[np.ndarray] = []
        rets: list[np.ndarray] = []
        for i, s in enumerate(samples):
            m = np.asarray(s.loss_mask).astype(np.float32)
            advs.append((m * per_sample[i]).astype(np.float32))
            rets.append((m * float(s.reward)).astype(np.float32))
        return advs, rets


def compute_advantages(
    samples: Sequence[TrainSample], values: Sequence[np.ndarray] | None, ppo_spec: PPOSpec
) -> Streams:
    """Per-sample advantages and returns from the estimator ``ppo_spec.advantage.estimator`` names.

    Args:
        samples: the batch.
        values: the pre-update critic values (needed by estimators whose ``uses_critic`` is true), or None.
        ppo_spec: the recipe's PPO spec.

    Returns:
        `Streams`, never normalized (T1 §5.2).

    Raises:
        BackendNotBuilt: the estimator has no registered implementation.
        ValueError: a critic-based estimator got no ``values``.
    """
    estimator = ADVANTAGE_ESTIMATORS.load(ppo_spec.advantage.estimator)
    return estimator.compute(samples, values, ppo_spec.advantage)
