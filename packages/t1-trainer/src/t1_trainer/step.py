"""One PPO step in the paper's order, and the critic warm-up (T1 §4.5, appendix on the critic's version axis).

Order per step: pre-update critic values -> advantages (GAE against those values) -> critic update (value clip
around the same values) -> actor update (R3 replay). The driver publishes the actor's weights afterwards.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch

from t1_trainer.algorithms import explained_variance, gae, grpo_advantages
from t1_trainer.config import PpoHyperparams
from t1_trainer.samples import TrainSample, check_sample, reward_stream
from t1_trainer.torch_backend import TrainerBackend

__all__ = ["StepMetrics", "compute_advantages", "critic_warmup", "ppo_step"]

StepMetrics = dict[str, Any]
"""Flat metrics of one step (floats and ints, plus ``routing_errors``: list of str); names in `ppo_step`."""


def compute_advantages(
    samples: Sequence[TrainSample], values: Sequence[np.ndarray] | None, hp: PpoHyperparams
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per-sample advantages and returns, float32 ``[T]`` each (0 at masked positions).

    ``gae``: T1 §4.5 against the pre-update ``values`` (required). ``grpo`` (ablation): every loss token of a
    sample gets its group-relative advantage, groups formed by ``task_id`` (`grpo_advantages`); returns are
    the rewards on loss tokens (unused: GRPO trains no critic). Never normalized (T1 §5.2).
    """
    advs: list[np.ndarray] = []
    rets: list[np.ndarray] = []
    if hp.estimator == "gae":
        if values is None:
            raise ValueError("gae needs the pre-update critic values")
        for s, v in zip(samples, values, strict=True):
            mask = torch.as_tensor(np.asarray(s.loss_mask))
            a, r = gae(reward_stream(s), torch.as_tensor(v), mask, gamma=hp.gamma, lam=hp.lam)
            advs.append(a.numpy().astype(np.float32))
            rets.append(r.numpy().astype(np.float32))
        return advs, rets
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(samples):
        groups.setdefault(str(s.task_id), []).append(i)
    per_sample = np.zeros(len(samples))
    group_adv = grpo_advantages([[samples[i].reward for i in g] for g in groups.values()])
    for idx, a in zip(groups.values(), group_adv, strict=True):
        per_sample[idx] = a
    for i, s in enumerate(samples):
        m = np.asarray(s.loss_mask).astype(np.float32)
        advs.append((m * per_sample[i]).astype(np.float32))
        rets.append((m * float(s.reward)).astype(np.float32))
    return advs, rets


def ppo_step(backend: TrainerBackend, samples: Sequence[TrainSample], ppo_spec: Any) -> StepMetrics:
    """One PPO step: values, advantages, critic update, then actor update (T1 §4.5; verl's order).

    Samples whose routing record cannot be replayed are aborted for the whole step (neither critic nor actor
    trains on a stream whose record disagrees with it) and listed in ``routing_errors``.

    Args:
        backend: a `TrainerBackend` (e.g. `TorchBackend`).
        samples: the batch (TITO samples).
        ppo_spec: the recipe's PPO spec or `PpoHyperparams`.

    Returns:
        Metrics: ``samples``, ``samples_aborted_routing``, ``routing_errors``, ``loss_tokens``,
        ``reward_mean``, ``critic_explained_variance`` (pre-update values vs returns over loss tokens; nan
        when the returns have no variance), ``value_mean``, ``return_mean``, ``advantage_mean``,
        ``value_loss``, ``value_loss_last``, ``value_clip_fraction``, ``critic_grad_norm``, ``policy_loss``,
        ``policy_loss_first``, ``clip_fraction``, ``approx_kl``, ``approx_kl_k3``, ``ratio_mean``,
        ``ratio_min``, ``ratio_max``, ``actor_grad_norm``, ``logprob_gap_replay`` (mask-weighted mean
        ``|log p_trainer - log p_rollout|`` on loss tokens, first pre-update actor forward),
        ``logprob_gap_no_replay`` (when the backend measures it), ``values_time_s``, ``critic_time_s``,
        ``actor_time_s``, ``step_time_s``. With ``grpo`` the critic entries are absent.

    Raises:
        SampleError: a sample's streams are inconsistent (see `check_sample`).
        TrainerConfigError: settings the trainer refuses.
    """
    t0 = time.perf_counter()
    hp = PpoHyperparams.from_spec(ppo_spec)
    for s in samples:
        check_sample(s)
    errors = backend.routing_errors(samples)
    kept = [s for i, s in enumerate(samples) if i not in errors]
    metrics: StepMetrics = {
        "samples": len(samples),
        "samples_aborted_routing": len(errors),
        "routing_errors": [errors[i] for i in sorted(errors)],
        "reward_mean": float(np.mean([s.reward for s in samples])) if samples else float("nan"),
    }
    if not kept:
        metrics["step_time_s"] = time.perf_counter() - t0
        return metrics
    masks = [np.asarray(s.loss_mask).astype(bool) for s in kept]
    metrics["loss_tokens"] = int(sum(m.sum() for m in masks))
    values = None
    if hp.estimator == "gae":
        tv = time.perf_counter()
        values = backend.values(kept)
        metrics["values_time_s"] = time.perf_counter() - tv
    advs, rets = compute_advantages(kept, values, hp)
    metrics["advantage_mean"] = float(np.concatenate([a[m] for a, m in zip(advs, masks, strict=True)]).mean())
    if values is not None:
        v_cat = np.concatenate([v[m] for v, m in zip(values, masks, strict=True)])
        r_cat = np.concatenate([r[m] for r, m in zip(rets, masks, strict=True)])
        ones = torch.ones(v_cat.shape[0])
        metrics["critic_explained_variance"] = explained_variance(
            torch.as_tensor(v_cat), torch.as_tensor(r_cat), ones
        )
        metrics["value_mean"] = float(v_cat.mean())
        metrics["return_mean"] = float(r_cat.mean())
        metrics.update(backend.update_critic(kept, rets, values))
    actor = backend.update_actor(kept, advs)
    # routing was checked above; anything the actor still aborted is added to the step's count
    metrics["samples_aborted_routing"] += actor.pop("samples_aborted_routing", 0)
    metrics["routing_errors"] += actor.pop("routing_errors", [])
    metrics.update(actor)
    metrics["step_time_s"] = time.perf_counter() - t0
    return metrics


def critic_warmup(
    backend: TrainerBackend, batches: Iterable[Sequence[TrainSample]], ppo_spec: Any
) -> list[StepMetrics]:
    """Critic-only updates before any policy step (T1 §4.5: one epoch of warm-up; `003_*.txt`).

    For each rollout batch the driver feeds (it decides what one epoch is): pre-update values, GAE returns,
    one critic update; the actor is untouched. Samples with unreplayable routing are still used here (the
    critic never replays routing), but counted.

    Returns:
        Per batch: ``samples``, ``critic_explained_variance`` (before that batch's update), ``value_loss``,
        ``value_loss_last``, ``value_clip_fraction``, ``critic_grad_norm``, ``critic_time_s``.
    """
    hp = PpoHyperparams.from_spec(ppo_spec)
    out: list[StepMetrics] = []
    for batch in batches:
        for s in batch:
            check_sample(s)
        values = backend.values(batch)
        _, rets = compute_advantages(batch, values, PpoHyperparams.from_spec(hp, estimator="gae"))
        masks = [np.asarray(s.loss_mask).astype(bool) for s in batch]
        v_cat = np.concatenate([v[m] for v, m in zip(values, masks, strict=True)])
        r_cat = np.concatenate([r[m] for r, m in zip(rets, masks, strict=True)])
        ev = explained_variance(torch.as_tensor(v_cat), torch.as_tensor(r_cat), torch.ones(v_cat.shape[0]))
        met: StepMetrics = {"samples": len(batch), "critic_explained_variance": ev}
        met.update(backend.update_critic(batch, rets, values))
        out.append(met)
    return out
