"""One PPO step in the paper's order, and the critic warm-up (T1 §4.5, appendix on the critic's version axis).

Order per step: pre-update critic values -> advantages (GAE against those values) -> critic update (value clip
around the same values) -> actor update (R3 replay). The driver then publishes the actor's weights
(`t1_trainer.publish.publish_weights`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from t1_spec import GAEAdvantageSpec, PPOSpec
from t1_trainer.advantages import ADVANTAGE_ESTIMATORS, GAEEstimator
from t1_trainer.algorithms import explained_variances
from t1_trainer.base import TrainerBackend
from t1_trainer.samples import TrainSample, check_sample

__all__ = ["StepMetrics", "critic_warmup", "critic_warmup_step", "ppo_step"]

StepMetrics = dict[str, Any]
"""Flat metrics of one step (floats and ints, plus ``routing_errors``: list of str); names in `ppo_step`."""


def _ev_metrics(
    samples: Sequence[TrainSample], values: Sequence[np.ndarray], rets: Sequence[np.ndarray]
) -> StepMetrics:
    """Pre-update explained variance (T1 Eq. 19) per token and per trajectory, and the loss-token means.

    ``critic/explained_variance`` keeps its meaning (verl's ``critic/vf_explained_var``: pre-update values
    against the returns over every loss token) and equals ``critic/ev_token_pre``;
    ``critic/ev_trajectory_pre`` takes one point per trial (`t1_trainer.algorithms.explained_variances`).
    """
    masks = [np.asarray(s.loss_mask).astype(bool) for s in samples]
    v_cat = np.concatenate([v[m] for v, m in zip(values, masks, strict=True)])
    r_cat = np.concatenate([r[m] for r, m in zip(rets, masks, strict=True)])
    ev_token, ev_trajectory = explained_variances(samples, values, rets)
    return {
        "critic/explained_variance": ev_token,
        "critic/ev_token_pre": ev_token,
        "critic/ev_trajectory_pre": ev_trajectory,
        "critic/value_mean": float(v_cat.mean()),
        "critic/return_mean": float(r_cat.mean()),
    }


def ppo_step(backend: TrainerBackend, samples: Sequence[TrainSample], ppo_spec: PPOSpec) -> StepMetrics:
    """One PPO step: values, advantages, critic update, then actor update (T1 §4.5; verl's order).

    Samples whose routing record cannot be replayed are aborted for the whole step (neither critic nor actor
    trains on a stream whose record disagrees with it) and listed in ``routing_errors``.

    Args:
        backend: a `TrainerBackend` (e.g. `TorchBackend`).
        samples: the batch (TITO samples).
        ppo_spec: the recipe's PPO spec; its ``advantage`` section picks the estimator
            (`t1_trainer.advantages.ADVANTAGE_ESTIMATORS`). The backend's own settings (learning rates,
            clips, replay) are the ones it was built with.

    Returns:
        Metrics. Step: ``trainer/samples``, ``samples_aborted_routing``, ``routing_errors`` (list of str),
        ``trainer/loss_tokens``, ``trainer/advantage_mean``, ``trainer/values_time_s``,
        ``trainer/step_time_s``. Estimator: ``grpo/*`` for ``grpo`` (groups, their sizes, the groups of
        uniform reward, the largest per-group advantage mean; `GRPOEstimator.metrics`). Critic (absent when
        the estimator uses no critic, as ``grpo``): ``critic/explained_variance`` (pre-update values vs
        returns over loss tokens; nan when the returns have no variance), the same as
        ``critic/ev_token_pre``, ``critic/ev_trajectory_pre`` (one point per trial: ``V(s_0)`` against its
        return, `t1_trainer.algorithms.explained_variances`), ``critic/value_mean``, ``critic/return_mean``,
        and `TorchBackend.update_critic`'s ``critic/*``, among them ``critic/ev_token_post`` and
        ``critic/ev_trajectory_post`` (the updated critic's values against the same returns). Actor:
        `TorchBackend.update_actor`'s ``actor/*``, among them ``actor/logprob_gap_replay`` (mask-weighted mean
        ``|log p_trainer - log p_rollout|`` on loss tokens, first pre-update actor forward, replay on; every
        step) and, every ``trainer.logprob_gap_every`` steps from the first (the backend counts its actor
        updates), ``actor/logprob_gap_no_replay``, ``actor/routing_flip_fraction``,
        ``actor/routing_flip_fraction_layers`` and ``actor/gap_time_s`` (T1 §4.3, Fig. 6).

    Raises:
        SampleError: a sample's streams are inconsistent (see `check_sample`).
        BackendNotBuilt: the spec's advantage estimator has no registered implementation.
    """
    t0 = time.perf_counter()
    estimator = ADVANTAGE_ESTIMATORS.load(ppo_spec.advantage.estimator)
    for s in samples:
        check_sample(s)
    errors = backend.routing_errors(samples)
    kept = [s for i, s in enumerate(samples) if i not in errors]
    metrics: StepMetrics = {
        "trainer/samples": len(samples),
        "samples_aborted_routing": len(errors),
        "routing_errors": [errors[i] for i in sorted(errors)],
    }
    if not kept:
        metrics["trainer/step_time_s"] = time.perf_counter() - t0
        return metrics
    masks = [np.asarray(s.loss_mask).astype(bool) for s in kept]
    metrics["trainer/loss_tokens"] = int(sum(m.sum() for m in masks))
    values = None
    if estimator.uses_critic:
        tv = time.perf_counter()
        values = backend.values(kept)
        metrics["trainer/values_time_s"] = time.perf_counter() - tv
    advs, rets = estimator.compute(kept, values, ppo_spec.advantage)
    adv_cat = np.concatenate([a[m] for a, m in zip(advs, masks, strict=True)])
    metrics["trainer/advantage_mean"] = float(adv_cat.mean())
    metrics.update(estimator.metrics(kept, advs))
    if values is not None:
        metrics.update(_ev_metrics(kept, values, rets))
        metrics.update(backend.update_critic(kept, rets, values))
    actor = backend.update_actor(kept, advs)
    # routing was checked above; anything the actor still aborted is added to the step's count
    metrics["samples_aborted_routing"] += actor.pop("samples_aborted_routing", 0)
    metrics["routing_errors"] += actor.pop("routing_errors", [])
    metrics.update(actor)
    metrics["trainer/step_time_s"] = time.perf_counter() - t0
    return metrics


def critic_warmup_step(
    backend: TrainerBackend, samples: Sequence[TrainSample], ppo_spec: PPOSpec
) -> StepMetrics:
    """One critic-only update on one rollout batch (T1 §4.5 warm-up); the actor is untouched.

    Pre-update values, GAE returns, one critic update. The returns use the spec's ``gamma`` and ``lam`` when
    its estimator is GAE, and the defaults of `t1_spec.GAEAdvantageSpec` (the paper's 1.0 and 1.0)
    otherwise. The critic never replays routing, so samples with unreplayable records are still used.

    Returns:
        ``trainer/samples``, ``critic/explained_variance`` (before this update; = ``critic/ev_token_pre``),
        ``critic/ev_trajectory_pre``, ``critic/value_mean``, ``critic/return_mean`` and
        `TorchBackend.update_critic`'s ``critic/*`` (with ``critic/ev_token_post`` and
        ``critic/ev_trajectory_post``).

    Raises:
        SampleError: a sample's streams are inconsistent.
    """
    gae_spec = ppo_spec.advantage if isinstance(ppo_spec.advantage, GAEAdvantageSpec) else GAEAdvantageSpec()
    for s in samples:
        check_sample(s)
    values = backend.values(samples)
    _, rets = GAEEstimator.compute(samples, values, gae_spec)
    met: StepMetrics = {"trainer/samples": len(samples), **_ev_metrics(samples, values, rets)}
    met.update(backend.update_critic(samples, rets, values))
    return met


def critic_warmup(
    backend: TrainerBackend, batches: Iterable[Sequence[TrainSample]], ppo_spec: PPOSpec
) -> list[StepMetrics]:
    """Critic-only updates before any policy step (T1 §4.5: one epoch of warm-up, `003_*.txt`).

    Runs `critic_warmup_step` on each rollout batch the driver feeds; the driver decides what one epoch is
    (T1: one pass over the warm-up pool; `t1.run.loop.warmup_steps` rolls out enough batches to draw every
    task of ``critic_warmup.pool`` ``critic_warmup.epochs`` times).

    Returns:
        Per batch, `critic_warmup_step`'s metrics.
    """
    return [critic_warmup_step(backend, batch, ppo_spec) for batch in batches]
