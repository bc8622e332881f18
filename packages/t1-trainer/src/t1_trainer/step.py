"""One PPO step in the paper's order, and the critic warm-up (T1 §4.5, appendix on the critic's version axis).

Order per step: staleness check -> pre-update critic values -> advantages (GAE against those values) -> critic
update (value clip around the same values) -> actor update (R3 replay). The driver then publishes the actor's
weights (`t1_trainer.publish.publish_weights`), which advances the trainer's ``policy_version``.

Versions (T1 Appendix 12). Weight version v is the actor after v publications; the trainer holds
``backend.policy_version`` and every sample carries the version that sampled it. The synchronous loop trains
each batch at staleness 0; the one-step asynchronous loop trains its first batch at 0 and every later one at
exactly 1 (the batch of update t was drawn under ``pi_{t-1}``), and `ppo_step` refuses any sample off that
(`StalenessError`). With rollout up to k versions ahead (``runtime.max_staleness``) a step trains at its own
staleness s <= k, and any sample older than k is refused by that bound's name.
The PPO ratio ``r_j(theta) = pi_theta / pi_old`` of ``L_pi`` (T1 Eq. 17) takes as
``pi_old`` the policy that drew the sample: at staleness 0 the trainer holds those very weights and recomputes
the log-probs (the trainer's implementation of the same version, with replayed routing, so pass 1 has ratio
exactly 1); at staleness 1 the trainer no longer holds ``theta_{t-1}``, and the log-probs of ``pi_{t-1}`` it
has are the rollout's (``pi^r_{t-1}``), so those are the ratio's denominator. Recomputing them with
``theta_t`` would give ratio 1 on pass 1 and drop the trust region around the behaviour policy altogether. The
critic's version axis is separate: GAE and the value clip use ``V_{phi_{t-1}}``, the values of the critic the
trainer holds before this step's critic update, at any staleness (the critic regresses on returns and needs no
behavioural fidelity).

Partial-rollout continuation (T1 §10, ``rollout.continuation``) adds samples that are older, or that mix
versions within one chunk: a trajectory parked at the end of step t and continued in step t+1 has turns of
``pi_t`` and of ``pi_{t+1}``. `check_staleness` accepts them only within the allowance the recipe grants
(`continuation_lag`: ``max_resumes`` with continuation on, 0 off, so the check stays strict), and for each
such sample the ratio's denominator is the rollout's per-token log-probs, the very policy that drew each
token (T1 Eq. 17, Appendix 12, as at staleness 1), while the samples at the step's own staleness 0 keep the
recomputation. No one set of weights the trainer holds drew a mixed chunk, so recomputing would be wrong for
some of its tokens whatever version were used.

With an importance correction (``ppo.off_policy``: ``tis`` or ``icepop``, `t1_trainer.off_policy`) the ratio's
denominator is the trainer's recomputation at every staleness, continued samples included, and the behaviour
policy enters through the correction's per-token weight ``pi_trainer / pi_rollout`` instead (decoupled PPO).
"""

from __future__ import annotations

import numbers
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from t1_spec import GAEAdvantageSpec, PPOSpec, RolloutSpec
from t1_trainer.advantages import ADVANTAGE_ESTIMATORS, GAEEstimator
from t1_trainer.base import TrainerBackend
from t1_trainer.errors import StalenessError
from t1_trainer.off_policy import OFF_POLICY_CORRECTIONS
from t1_trainer.samples import TrainSample, check_sample, sample_name
from t1_trainer.update import batch_explained_variances

__all__ = [
    "StepMetrics",
    "check_staleness",
    "continuation_lag",
    "critic_warmup",
    "critic_warmup_step",
    "ppo_step",
]

StepMetrics = dict[str, Any]
"""Flat metrics of one step (floats and ints, plus ``routing_errors``: list of str); names in `ppo_step`."""


def _ev_metrics(
    backend: TrainerBackend,
    samples: Sequence[TrainSample],
    values: Sequence[np.ndarray],
    rets: Sequence[np.ndarray],
) -> StepMetrics:
    """Pre-update explained variance (T1 Eq. 19) per token and per trajectory, and the loss-token means.

    ``critic/explained_variance`` keeps its meaning (verl's ``critic/vf_explained_var``: pre-update values
    against the returns over every loss token) and equals ``critic/ev_token_pre``;
    ``critic/ev_trajectory_pre`` takes one point per trial (`t1_trainer.algorithms.explained_variances`).
    """
    masks = [np.asarray(s.loss_mask).astype(bool) for s in samples]
    v_cat = np.concatenate([v[m] for v, m in zip(values, masks, strict=True)])
    r_cat = np.concatenate([r[m] for r, m in zip(rets, masks, strict=True)])
    # over the whole batch: a data-parallel backend gathers its group's shards (t1_trainer.update)
    ev_token, ev_trajectory = batch_explained_variances(backend, samples, values, rets)
    return {
        "critic/explained_variance": ev_token,
        "critic/ev_token_pre": ev_token,
        "critic/ev_trajectory_pre": ev_trajectory,
        "critic/value_mean": float(v_cat.mean()),
        "critic/return_mean": float(r_cat.mean()),
    }


def continuation_lag(rollout: RolloutSpec) -> int:
    """Versions a sample may lag beyond the step's staleness: ``continuation.max_resumes`` when on, else 0.

    A trial parked at the end of step t and continued in each of the next ``max_resumes`` steps has its oldest
    turn at most ``max_resumes`` versions behind the trainer that trains on it (T1 §10,
    `t1_rollout.continuation`); without continuation nothing may lag (T1 Appendix 12).
    """
    spec = rollout.continuation
    return spec.max_resumes if spec.enabled else 0


def check_staleness(
    backend: TrainerBackend,
    samples: Sequence[TrainSample],
    staleness: int,
    *,
    continuation_lag: int = 0,
    max_staleness: int | None = None,
) -> StepMetrics:
    """Checks that every sample is exactly ``staleness`` versions behind the trainer (T1 Appendix 12).

    A sample's staleness is ``backend.policy_version - sample.policy_version``. A TITO chunk carries one
    version, the oldest of its turns (`t1_tito.Sample.policy_version`). Without continuation
    (``continuation_lag`` 0) a chunk whose turns came from more than one version (``policy_versions_mixed``,
    which only partial-rollout continuation creates) is refused, since no one ``pi_old`` drew it. With it, a
    sample may be up to ``continuation_lag`` versions older than ``staleness`` and may mix versions (T1 §10);
    never newer. A backend without ``policy_version`` counts as version 0 (never published).

    Args:
        backend: the trainer; its ``policy_version`` is the version of the actor weights it last published.
        samples: the batch.
        staleness: the staleness this step trains at: 0 in the synchronous loop and for the first step of the
            asynchronous one, 1 for every later asynchronous step.
        continuation_lag: the allowance of partial-rollout continuation (`continuation_lag` of the recipe's
            ``rollout``): 0 keeps the check strict.
        max_staleness: the bound of the asynchronous loop (``runtime.max_staleness``), or None for none: a
            sample older than it, or a ``staleness`` above it, is refused first, by that bound's name.

    Returns:
        ``staleness`` (the largest over the batch), ``staleness_min``, ``staleness_loss_token_share`` (per
        staleness, as a string key, the share of the batch's loss tokens in samples of that staleness: a
        chunk counts at its oldest turn's), ``samples_versions_mixed`` and ``trainer/policy_version``; all but
        the last are absent for an empty batch.

    Raises:
        StalenessError: ``staleness`` or ``continuation_lag`` is negative or not an int, a sample is older
            than ``max_staleness`` (naming it), or a sample is off the allowed range (naming the first few,
            their versions, the trainer's version and the expected staleness), or a chunk mixes versions
            without continuation.
    """
    version = int(getattr(backend, "policy_version", 0))
    for name, value in (("staleness", staleness), ("continuation_lag", continuation_lag)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
            raise StalenessError(
                f"ppo_step {name}={value!r}: must be an int >= 0 (staleness: 0 synchronous, 1 one-step "
                "asynchronous; continuation_lag: rollout.continuation.max_resumes, 0 without continuation)",
                trainer_version=version,
                expected=-1,
            )
    staleness, lag = int(staleness), int(continuation_lag)
    if max_staleness is not None:
        _check_bound(samples, staleness, int(max_staleness), version)
    off = [
        (s, int(s.policy_version))
        for s in samples
        if not staleness <= version - int(s.policy_version) <= staleness + lag
        or (getattr(s, "policy_versions_mixed", False) and not lag)
    ]
    if off:
        first, first_version = off[0]
        shown = "; ".join(_stale_line(s, v, version) for s, v in off[:3])
        more = f" (and {len(off) - 3} more)" if len(off) > 3 else ""
        allowed = (
            f"expects staleness {staleness}"
            if not lag
            else f"expects staleness {staleness} to {staleness + lag} (partial-rollout continuation)"
        )
        raise StalenessError(
            f"{len(off)} of {len(samples)} samples are not {staleness} version(s) behind the trainer, which "
            f"holds policy version {version} and {allowed}: {shown}{more}. Each batch "
            "must be drawn under exactly one version (synchronous: the trainer's own, staleness 0; one-step "
            "asynchronous: the previous one, staleness 1), continued trajectories aside; nothing was updated",
            sample=sample_name(first),
            sample_version=first_version,
            trainer_version=version,
            expected=staleness,
        )
    out: StepMetrics = {"trainer/policy_version": version}
    if samples:
        ages = [version - int(s.policy_version) for s in samples]
        tokens = Counter()
        for age, s in zip(ages, samples, strict=True):
            tokens[age] += int(np.asarray(s.loss_mask).sum())
        total = sum(tokens.values())
        out.update(
            staleness=max(ages),
            staleness_min=min(ages),
            staleness_loss_token_share={
                str(a): n / total if total else None for a, n in sorted(tokens.items())
            },
            samples_versions_mixed=sum(bool(getattr(s, "policy_versions_mixed", False)) for s in samples),
        )
    return out


def _check_bound(samples: Sequence[TrainSample], staleness: int, bound: int, version: int) -> None:
    """Refuse a step asked to train above ``bound`` or a sample older than it (`check_staleness`)."""
    old = [(s, int(s.policy_version)) for s in samples if version - int(s.policy_version) > bound]
    if staleness <= bound and not old:
        return
    shown = "; ".join(_stale_line(s, v, version) for s, v in old[:3])
    more = f" (and {len(old) - 3} more)" if len(old) > 3 else ""
    what = f"{len(old)} of {len(samples)} samples are" if old else f"ppo_step staleness={staleness} is"
    raise StalenessError(
        f"{what} older than runtime.max_staleness {bound} (the trainer holds policy version {version})"
        f"{': ' + shown if old else ''}{more}; rollout may run at most max_staleness versions ahead of "
        "training (T1 Appendix 12), nothing was updated",
        sample=sample_name(old[0][0]) if old else "",
        sample_version=old[0][1] if old else -1,
        trainer_version=version,
        expected=staleness,
    )


def _stale_line(sample: TrainSample, sample_version: int, version: int) -> str:
    """One refused sample for `StalenessError`'s message."""
    if getattr(sample, "policy_versions_mixed", False) and version - sample_version >= 0:
        return (
            f"sample {sample_name(sample)} mixes weight versions (oldest {sample_version}); a chunk must "
            "come from one version unless partial-rollout continuation (rollout.continuation) carried it over"
        )
    age = version - sample_version
    newer = ", newer than the trainer's weights" if age < 0 else ""
    return f"sample {sample_name(sample)} drawn by version {sample_version} (staleness {age}{newer})"


def ppo_step(
    backend: TrainerBackend,
    samples: Sequence[TrainSample],
    ppo_spec: PPOSpec,
    *,
    staleness: int = 0,
    continuation_lag: int = 0,
    max_staleness: int | None = None,
) -> StepMetrics:
    """One PPO step: values, advantages, critic update, then actor update (T1 §4.5; verl's order).

    Samples whose routing record cannot be replayed are aborted for the whole step (neither critic nor actor
    trains on a stream whose record disagrees with it) and listed in ``routing_errors``.

    Args:
        backend: a `TrainerBackend` (e.g. `TorchBackend`).
        samples: the batch (TITO samples).
        ppo_spec: the recipe's PPO spec; its ``advantage`` section picks the estimator
            (`t1_trainer.advantages.ADVANTAGE_ESTIMATORS`). The backend's own settings (learning rates,
            clips, replay) are the ones it was built with.
        staleness: how many versions every sample must be behind ``backend.policy_version`` (T1 Appendix
            12): 0 in the synchronous loop (the default; the ratio's old log-probs are recomputed by the
            trainer), 1 in the one-step asynchronous loop after its first step (the ratio's old log-probs are
            the rollout's, ``sample.rollout_logprobs``; see the module docstring).
        continuation_lag: how many versions beyond ``staleness`` a sample may lag, mixed-version chunks
            allowed (`continuation_lag` of the recipe's ``rollout``; 0, the default, keeps the check strict).
            Each sample older than ``staleness`` or mixing versions takes the rollout's log-probs as the
            ratio's denominator; the others keep the step's own choice.
        max_staleness: the asynchronous loop's bound (``runtime.max_staleness``; None: no bound beyond the
            exact check): a sample older than it is refused by that name (`check_staleness`). At any
            staleness >= 1 the ratio's denominator is the rollout's log-probs, as at 1.

    Returns:
        Metrics. Versions (`check_staleness`): ``staleness`` (largest over the batch), ``staleness_min``,
        ``staleness_loss_token_share``, ``samples_versions_mixed``, ``trainer/policy_version``. Step:
        ``trainer/samples``, ``samples_aborted_routing``, ``routing_errors``
        (list of str), ``trainer/loss_tokens``, ``trainer/advantage_mean``, ``trainer/values_time_s``,
        ``trainer/step_time_s``. Estimator: ``grpo/*`` for ``grpo`` (groups, their sizes, the groups of
        uniform reward, the largest per-group advantage mean; `GRPOEstimator.metrics`). Critic (absent when
        the estimator uses no critic, as ``grpo``): ``critic/explained_variance`` (pre-update values vs
        returns over loss tokens; nan when the returns have no variance), the same as ``critic/ev_token_pre``,
        ``critic/ev_trajectory_pre`` (one point per trial: ``V(s_0)`` against its return,
        `t1_trainer.algorithms.explained_variances`), ``critic/value_mean``, ``critic/return_mean``, and
        `TorchBackend.update_critic`'s ``critic/*``, among them ``critic/ev_token_post`` and
        ``critic/ev_trajectory_post`` (the updated critic's values against the same returns). Actor:
        `TorchBackend.update_actor`'s ``actor/*``, among them ``actor/logprob_gap_replay`` (mask-weighted mean
        ``|log p_trainer - log p_rollout|`` on loss tokens, first pre-update actor forward, replay on; every
        step) and, every ``trainer.logprob_gap_every`` steps from the first (the backend counts its actor
        updates), ``actor/logprob_gap_no_replay``, ``actor/routing_flip_fraction``,
        ``actor/routing_flip_fraction_layers`` and ``actor/gap_time_s`` (T1 §4.3, Fig. 6); with
        ``ppo.off_policy`` on, ``actor/off_policy_weight_mean`` and the share of loss tokens truncated
        (``actor/off_policy_truncated_fraction``, ``tis``) or masked (``actor/off_policy_masked_fraction``,
        ``icepop``; `t1_trainer.off_policy`); the Eq. 25 split ``actor/mismatch_kernel``,
        ``actor/mismatch_version``, ``actor/mismatch_decomposed_fraction`` (`t1_trainer.mismatch`).

    Raises:
        SampleError: a sample's streams are inconsistent (see `check_sample`).
        StalenessError: a sample is not exactly ``staleness`` versions old, or mixes versions, or
            ``staleness`` is negative (`check_staleness`); raised before any update.
        BackendNotBuilt: the spec's advantage estimator has no registered implementation.
    """
    t0 = time.perf_counter()
    estimator = ADVANTAGE_ESTIMATORS.load(ppo_spec.advantage.estimator)
    for s in samples:
        check_sample(s)
    versions = check_staleness(
        backend, samples, staleness, continuation_lag=continuation_lag, max_staleness=max_staleness
    )
    errors = backend.routing_errors(samples)
    kept = [s for i, s in enumerate(samples) if i not in errors]
    metrics: StepMetrics = {
        **versions,
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
        metrics.update(_ev_metrics(backend, kept, values, rets))
        metrics.update(backend.update_critic(kept, rets, values))
    actor = backend.update_actor(kept, advs, **_behaviour(backend, kept, staleness, ppo_spec))
    # routing was checked above; anything the actor still aborted is added to the step's count
    metrics["samples_aborted_routing"] += actor.pop("samples_aborted_routing", 0)
    metrics["routing_errors"] += actor.pop("routing_errors", [])
    metrics.update(actor)
    metrics["trainer/step_time_s"] = time.perf_counter() - t0
    return metrics


def _behaviour(
    backend: TrainerBackend, samples: Sequence[TrainSample], staleness: int, ppo_spec: PPOSpec
) -> dict[str, Any]:
    """``update_actor``'s ``old_logprobs`` for ``samples`` (T1 Eq. 17, Appendix 12; module docstring).

    Staleness 0 keeps the backend's own recomputation (and the call without the keyword); >= 1 takes the
    rollout's. A batch with continued samples (older than 0, or mixed) names the choice per sample. With
    ``ppo.off_policy`` on, every sample keeps the recomputation (the call without the keyword): the
    correction's weight ``pi_trainer / pi_rollout`` carries the behaviour policy (`t1_trainer.off_policy`).
    """
    if OFF_POLICY_CORRECTIONS.load(ppo_spec.off_policy.kind).active:
        return {}
    if staleness:
        return {"old_logprobs": "rollout"}
    version = int(getattr(backend, "policy_version", 0))
    older = [
        version - int(s.policy_version) > 0 or bool(getattr(s, "policy_versions_mixed", False))
        for s in samples
    ]
    if not any(older):
        return {}
    return {"old_logprobs": ["rollout" if o else "recomputed" for o in older]}


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
    met: StepMetrics = {"trainer/samples": len(samples), **_ev_metrics(backend, samples, values, rets)}
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
