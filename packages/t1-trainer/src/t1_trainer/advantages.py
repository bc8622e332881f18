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
"""``ppo.advantage.estimator`` -> the estimator class; each has ``uses_critic`` and static ``compute`` and
``metrics``."""

Streams = tuple[list[np.ndarray], list[np.ndarray]]
"""``(advantages, returns)``: per sample, float32 ``[T]`` each, 0 at masked positions."""


class GAEEstimator:
    """Generalized advantage estimation against the pre-update critic (T1 §4.5), the paper's estimator."""

    uses_critic: ClassVar[bool] = True
    """GAE bootstraps from the critic's values, so the step computes them and updates the critic."""

    @staticmethod
    def metrics(samples: Sequence[TrainSample], advantages: Sequence[np.ndarray]) -> dict[str, float | int]:
        """No estimator-specific figures: the step reports the critic's (`t1_trainer.step.ppo_step`)."""
        return {}

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
    def groups(samples: Sequence[TrainSample]) -> dict[str, dict[str, list[int]]]:
        """The batch's groups: ``task_id -> trial_id -> indices of that trial's samples``, in batch order.

        A group is the trials of one task in one step (the scheduler draws each task at most once per step
        and launches ``ppo.samples_per_task`` trials on it, `t1_rollout.scheduler.collect_batch`). A trial
        split into several TITO chunks, or compacted, is one member: its chunks share one reward.
        """
        out: dict[str, dict[str, list[int]]] = {}
        for i, s in enumerate(samples):
            out.setdefault(str(s.task_id), {}).setdefault(str(s.trial_id), []).append(i)
        return out

    @staticmethod
    def compute(
        samples: Sequence[TrainSample], values: Sequence[np.ndarray] | None, spec: GRPOAdvantageSpec
    ) -> Streams:
        """Every loss token of a trial gets its group's relative advantage (`grpo_advantages`).

        Groups are formed by ``task_id`` over trials, not samples (`groups`): each trial's reward enters its
        group's mean and standard deviation once, whatever its chunk count, and every chunk of the trial
        gets the trial's advantage. A group of one, and a group whose rewards are all equal, gets advantage
        exactly 0 (no signal, T1 §9). Returns are the rewards on loss tokens (unused: GRPO trains no critic).

        Args:
            samples: the batch.
            values: ignored (GRPO has no critic).
            spec: the GRPO section of the recipe's PPO spec (``group_size`` is the spec's rule; groups are
                the trials that share a task; the scheduler admits only whole groups).

        Returns:
            `Streams`.
        """
        per_sample = np.zeros(len(samples))
        groups = GRPOEstimator.groups(samples)
        rewards = [[float(samples[idx[0]].reward) for idx in g.values()] for g in groups.values()]
        for g, adv in zip(groups.values(), grpo_advantages(rewards), strict=True):
            for idx, a in zip(g.values(), adv, strict=True):
                per_sample[idx] = a
        advs: list[np.ndarray] = []
        rets: list[np.ndarray] = []
        for i, s in enumerate(samples):
            m = np.asarray(s.loss_mask).astype(np.float32)
            advs.append((m * per_sample[i]).astype(np.float32))
            rets.append((m * float(s.reward)).astype(np.float32))
        return advs, rets

    @staticmethod
    def metrics(samples: Sequence[TrainSample], advantages: Sequence[np.ndarray]) -> dict[str, float | int]:
        """The groups of a GRPO step, so the ablation's degeneracy is visible (T1 §9).

        Returns:
            ``grpo/groups``; ``grpo/group_size_min`` and ``_max`` (trials per group); ``grpo/uniform_groups``
            (groups whose trials all scored the same, all failed or all succeeded: zero advantage, no
            gradient) and ``grpo/uniform_group_fraction``; ``grpo/group_advantage_mean_abs_max`` (over groups,
            the largest ``|mean|`` of the members' advantages: 0 up to rounding, the group baseline's
            defining property).
        """
        groups = GRPOEstimator.groups(samples)
        sizes = [len(g) for g in groups.values()]
        uniform, worst = 0, 0.0
        for g in groups.values():
            rewards = {float(samples[idx[0]].reward) for idx in g.values()}
            uniform += len(rewards) == 1
            member_adv = [_trial_advantage(samples[idx[0]], advantages[idx[0]]) for idx in g.values()]
            worst = max(worst, abs(float(np.mean(member_adv))))
        n = len(groups)
        return {
            "grpo/groups": n,
            "grpo/group_size_min": min(sizes) if sizes else 0,
            "grpo/group_size_max": max(sizes) if sizes else 0,
            "grpo/uniform_groups": uniform,
            "grpo/uniform_group_fraction": uniform / n if n else float("nan"),
            "grpo/group_advantage_mean_abs_max": worst,
        }


def _trial_advantage(sample: TrainSample, advantage: np.ndarray) -> float:
    """The scalar advantage GRPO gave a sample's trial: its value at the sample's reward token."""
    return float(np.asarray(advantage)[int(sample.reward_index)])


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
