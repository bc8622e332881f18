"""The PPO update, written once: critic regression and clipped-surrogate actor update over any backend.

Every trainer backend (`t1_trainer.torch_backend.TorchBackend`, `t1_trainer.megatron.backend.MegatronBackend`)
runs its ``update_critic`` and ``update_actor`` through `update_critic` and `update_actor` here: the passes
(``ppo.ppo_epochs``), the micro-batches (one sample each, or several packed in one variable-length forward
with ``ppo.micro_batch_size > 1``: `t1_trainer.packing`), the token-weighted metrics, the cadence of the
live-routing gap (`gap_due`), the importance correction (`t1_trainer.off_policy`), the Eq. 25 split
(`t1_trainer.mismatch`) and the grad-norm bookkeeping. A backend supplies the hooks of `UpdateBackend`:
forward (the actor's log-probs with or without replayed routing, the critic's values), backward, the
optimizer step with clipping and its non-finite guard (`t1_trainer.optim.clip_and_step` on a torch
optimizer), and its device scope. The step order around them (values, advantages, critic, then actor) is
`t1_trainer.step.ppo_step`'s. A data-parallel backend (`t1_trainer.data_parallel`) also supplies three
optional hooks, looked up by name and absent on one rank: ``group_loss_tokens`` (`loss_token_count`),
``accumulating`` (`micro_batch_scope`) and ``group_explained_variances`` (`batch_explained_variances`).
A backend that packs supplies ``packed`` (`t1_trainer.packing.forward_scope`); its other hooks then also
receive a `t1_trainer.packing.PackedSamples` where they would receive a sample. A pipelined backend supplies
``pipelined`` (`run_micro_batches`): a pass's forwards and backwards then run in its schedule.

Losses and their metrics are `t1_trainer.algorithms`' (T1 Eq. 17 clipped surrogate, the clipped value loss;
T1 §4.5): no KL, no load-balancing loss, no advantage normalization (T1 §5.2).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from functools import partial
from typing import Any, Literal, Protocol

import numpy as np
import torch
from torch import nn

from t1_spec import PPOSpec
from t1_trainer.actor_metrics import PassMetrics, actor_summary
from t1_trainer.algorithms import explained_variances, ppo_policy_loss, value_loss
from t1_trainer.base import OldLogprobs
from t1_trainer.errors import TrainerConfigError
from t1_trainer.mismatch import StateDict, mismatch_terms
from t1_trainer.off_policy import OFF_POLICY_CORRECTIONS
from t1_trainer.packing import MicroBatch, forward_scope, micro_batches
from t1_trainer.samples import TrainSample, check_sample, loss_mask_tensor, routing_array

__all__ = [
    "Network",
    "UpdateBackend",
    "batch_explained_variances",
    "behaviour_sources",
    "gap_due",
    "live_gap",
    "logprob_gap",
    "loss_token_count",
    "micro_batch_scope",
    "run_micro_batches",
    "update_actor",
    "update_critic",
]

Network = Literal["actor", "critic"]
"""Which of the backend's two networks a hook acts on."""


class UpdateBackend(Protocol):
    """The hooks the shared update loop calls on a backend (a micro-batch is a sample or a packed row).

    Attributes are the backend's settings and counters; the loop reads the settings and advances the
    counters (``actor_updates`` and ``version`` are part of a checkpoint's resumable state).
    """

    ppo: PPOSpec
    """The PPO section the backend was built with (passes, clips, replay, correction)."""
    device: torch.device
    """Where the networks run; per-sample tensors are put there."""
    actor: nn.Module
    critic: nn.Module
    logprob_gap_every: int
    """Measure the live-routing gap every this many actor updates (`gap_due`); 0 = never."""
    actor_updates: int
    """Actor updates so far: the step counter of the gap's cadence."""
    version: int
    """Actor optimizer steps taken."""
    policy_version: int
    """The actor's last published version (T1 Appendix 12)."""
    behaviour_weights: tuple[int, StateDict] | None
    """``(version, weights)`` kept for the next gap step's Eq. 25 split, or None."""

    def routing_errors(self, samples: Sequence[TrainSample]) -> dict[int, str]:
        """Index -> reason for each sample whose record cannot be replayed (empty with replay off)."""
        ...

    def values(self, samples: Sequence[TrainSample]) -> list[np.ndarray]:
        """No-grad critic values, float32 ``[T]`` per sample, 0 at position 0."""
        ...

    def running(self, network: Network) -> AbstractContextManager[None]:
        """The scope ``network``'s passes run in (device residency under offload, device shims)."""
        ...

    def critic_values(self, sample: TrainSample) -> torch.Tensor:
        """Critic values ``[T]`` float32 with grad, 0 at position 0 (live routing)."""
        ...

    def actor_logprobs(self, sample: TrainSample) -> torch.Tensor:
        """Log-probs ``[n_loss]`` float32 of the loss tokens under the actor, with grad.

        Routed as the caller set: live, or replayed inside `replayed`.
        """
        ...

    def replayed(self, sample: TrainSample) -> AbstractContextManager[None]:
        """The actor's routers take ``sample.routing`` (R3, T1 §4.3) for the body: forward and backward."""
        ...

    def live_routing(self, sample: TrainSample) -> tuple[torch.Tensor, np.ndarray]:
        """One no-grad actor forward at live TopK: log-probs ``[n_loss]`` and routed experts ``[T, L, k]``."""
        ...

    def backward(self, loss: torch.Tensor, network: Network) -> None:
        """Back-propagates ``loss`` (a scalar) into ``network``'s gradients."""
        ...

    def zero_grad(self, network: Network) -> None:
        """Drops ``network``'s gradients before a pass."""
        ...

    def optimizer_step(self, network: Network) -> float:
        """Clips ``network``'s grad norm to ``ppo.max_grad_norm`` and steps; returns the norm before clipping.

        Raises:
            NonFiniteUpdateError: a non-finite gradient (no step taken) or a non-finite weight after it.
        """
        ...

    def snapshot_actor(self) -> StateDict | None:
        """A copy of the actor's weights for the next gap step's Eq. 25 split, or None (none kept)."""
        ...

    def swapped_actor(self, state: StateDict) -> AbstractContextManager[None]:
        """The body runs with ``state`` in the actor (from `snapshot_actor`), then its own weights return."""
        ...

    def export_weights(self) -> dict[str, torch.Tensor]:
        """Actor weights under the engine's state_dict names."""
        ...


def gap_due(ppo: PPOSpec, every: int, step: int) -> bool:
    """Whether actor update ``step`` (0-based) measures the live-routing gap: steps 0, k, 2k, ... (k = every).

    Never with ``ppo.routing_replay`` off (the step's one forward already routes live) or ``every`` 0
    (T1 §4.3, Fig. 6; ``trainer.logprob_gap_every``).
    """
    return bool(ppo.routing_replay and every and step % every == 0)


def loss_token_count(backend: UpdateBackend, n_local: float) -> float:
    """The denominator of the batch's token mean: ``n_local``, or the rank group's sum under data parallel.

    A backend that trains one shard of the batch per rank (`t1_trainer.data_parallel`) supplies
    ``group_loss_tokens``; each rank then divides by the whole batch's loss tokens, so the gradients the
    group sums equal the one-rank gradient of the same batch (T1 §4.5's token mean). Without it (one rank)
    ``n_local`` is returned unchanged.
    """
    group_tokens = getattr(backend, "group_loss_tokens", None)
    return n_local if group_tokens is None else float(group_tokens(n_local))


def micro_batch_scope(backend: UpdateBackend, network: Network, *, last: bool) -> AbstractContextManager[Any]:
    """The scope of one micro-batch's forward and backward: gradient sync deferred unless ``last``.

    A data-parallel backend supplies ``accumulating(network)`` (DDP's ``no_sync``): the micro-batches before
    the pass's last accumulate locally and the last one's backward sums the group's gradients. Without it,
    nothing is arranged.
    """
    accumulating = getattr(backend, "accumulating", None)
    return nullcontext() if accumulating is None or last else accumulating(network)


def run_micro_batches(
    backend: UpdateBackend,
    network: Network,
    batches: Sequence[MicroBatch],
    loss_of: Callable[[int, torch.Tensor], tuple[torch.Tensor, dict[str, float]]],
    *,
    replay: bool,
) -> list[tuple[float, dict[str, float]]]:
    """Forward, loss and backward of a pass's micro-batches: ``(loss, metrics)`` of each, in order.

    ``loss_of(j, head)``: micro-batch ``j``'s loss (its share of the batch's token mean) and metrics from the
    actor's log-probs ``[n_loss]`` or the critic's values ``[T]``, in `micro_batch_scope` and
    `t1_trainer.packing.forward_scope`. A pipelined backend's ``pipelined(network, units, loss_of, replay=)``
    runs them in its schedule instead (`t1_trainer.megatron.pipeline`).
    """
    pipelined = getattr(backend, "pipelined", None)
    if pipelined is not None:
        return pipelined(network, [mb.unit for mb in batches], loss_of, replay=replay)
    out = []
    for j, mb in enumerate(batches):
        with (
            micro_batch_scope(backend, network, last=j == len(batches) - 1),
            forward_scope(backend, network, mb.unit, replay=replay),
        ):
            head = backend.actor_logprobs(mb.unit) if network == "actor" else backend.critic_values(mb.unit)
            loss, met = loss_of(j, head)
            backend.backward(loss, network)
        out.append((loss.item(), met))
    return out


def batch_explained_variances(
    backend: Any, samples: Sequence[TrainSample], values: Sequence[np.ndarray], returns: Sequence[np.ndarray]
) -> tuple[float, float]:
    """`t1_trainer.algorithms.explained_variances` of the whole batch (T1 Eq. 19).

    A data-parallel backend supplies ``group_explained_variances``, which gathers every rank's shard first;
    otherwise the local samples are the batch.
    """
    group_ev = getattr(backend, "group_explained_variances", None)
    return (group_ev or explained_variances)(samples, values, returns)


def behaviour_sources(old_logprobs: OldLogprobs, n: int) -> list[bool]:
    """Per sample, whether the actor update's ratio takes the rollout's log-probs (T1 Appendix 12).

    Args:
        old_logprobs: ``recomputed`` or ``rollout`` for every sample, or one of them per sample.
        n: the batch's sample count.

    Raises:
        TrainerConfigError: a value that is neither ``recomputed`` nor ``rollout``, or a list of another
            length than ``n``.
    """
    choices = [old_logprobs] * n if isinstance(old_logprobs, str) else list(old_logprobs)
    if len(choices) != n:
        raise TrainerConfigError(
            f"update_actor old_logprobs: {len(choices)} per-sample choices for {n} samples; give one each"
        )
    bad = sorted({repr(c) for c in choices if c not in ("recomputed", "rollout")})
    if bad:
        raise TrainerConfigError(
            f"update_actor old_logprobs={', '.join(bad)}: use 'recomputed' (staleness 0) or 'rollout' "
            "(staleness >= 1, or a continued sample)"
        )
    return [c == "rollout" for c in choices]


def _rollout_at(sample: TrainSample, pos: torch.Tensor, device: torch.device) -> torch.Tensor:
    """The sampler's log-probs of the loss tokens at ``pos``, float32 ``[n_loss]``."""
    return torch.as_tensor(np.asarray(sample.rollout_logprobs), device=device)[pos].float()


def update_critic(
    backend: UpdateBackend,
    samples: Sequence[TrainSample],
    returns: Sequence[np.ndarray],
    old_values: Sequence[np.ndarray],
) -> dict[str, float]:
    """Regress the critic on the returns with the value clip around the pre-update values (T1 §4.5).

    ``ppo_epochs`` passes; each accumulates every sample's gradient (token-mean over the batch's loss
    tokens) and takes one optimizer step after clipping the global grad norm.

    Args:
        backend: the hooks (`UpdateBackend`).
        samples: the batch.
        returns: float ``[T]`` per sample (GAE returns; 0 at masked positions).
        old_values: float ``[T]`` per sample, from ``backend.values`` before any update this step.

    Returns:
        ``critic/value_loss`` (first pass, i.e. at the pre-update critic), ``critic/value_loss_last``
        (last pass), ``critic/value_clip_fraction``, ``critic/grad_norm`` (mean over passes, before
        clipping), ``critic/ev_token_post`` and ``critic/ev_trajectory_post`` (explained variance, T1
        Eq. 19, of the updated critic against the same returns, per loss token and per trial,
        `t1_trainer.algorithms.explained_variances`; one extra no-grad critic forward per sample, timed in
        ``critic/ev_post_time_s``), ``critic/time_s`` (all of it).

    Raises:
        NonFiniteUpdateError: from the optimizer step (`UpdateBackend.optimizer_step`).
    """
    t0 = time.perf_counter()
    ppo, device = backend.ppo, backend.device
    first: dict[str, float] = {}
    last_loss, norms = 0.0, []
    with backend.running("critic"):
        backend.critic.train()
        masks = [loss_mask_tensor(s, device) for s in samples]
        n_tok = float(sum(int(m.sum()) for m in masks))
        n_loss = loss_token_count(backend, n_tok)
        batches = micro_batches(samples, range(len(samples)), ppo)
        mb_masks = [mb.cat([masks[i] for i in mb.indices]) for mb in batches]

        def loss_of(j: int, values: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
            mb = batches[j]
            return value_loss(
                mb.values(values),
                mb.cat([torch.as_tensor(old_values[i], device=device) for i in mb.indices]),
                mb.cat([torch.as_tensor(returns[i], device=device) for i in mb.indices]),
                mb_masks[j],
                value_clip=ppo.value_clip,
                num_tokens=n_loss,
            )

        for epoch in range(ppo.ppo_epochs):
            backend.zero_grad("critic")
            total, clipped = 0.0, 0.0
            for m, (loss, met) in zip(
                mb_masks, run_micro_batches(backend, "critic", batches, loss_of, replay=False), strict=True
            ):
                total += loss
                clipped += met["value_clip_fraction"] * float(m.sum())
            norms.append(backend.optimizer_step("critic"))
            if epoch == 0:
                first = {"critic/value_loss": total, "critic/value_clip_fraction": clipped / max(n_tok, 1.0)}
            last_loss = total
    t_post = time.perf_counter()
    ev_token_post, ev_trajectory_post = batch_explained_variances(
        backend, samples, backend.values(samples), returns
    )
    return {
        **first,
        "critic/value_loss_last": last_loss,
        "critic/grad_norm": float(np.mean(norms)),
        "critic/ev_token_post": ev_token_post,
        "critic/ev_trajectory_post": ev_trajectory_post,
        "critic/ev_post_time_s": time.perf_counter() - t_post,
        "critic/time_s": time.perf_counter() - t0,
    }


class _FirstPass:
    """What the actor update records on its first pass, before any step: gaps, old log-probs, weights."""

    def __init__(self) -> None:
        self.gap_sum = 0.0  # sum |log p_trainer - log p_rollout| over loss tokens, replay as configured
        self.old: dict[int, torch.Tensor] = {}  # the ratio's denominator per sample
        self.pre: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # (trainer, rollout) log-probs
        self.weights: dict[int, torch.Tensor] = {}  # the correction's per-token weight
        self.affected, self.weight_sum = 0, 0.0
        # the live-routing forward of a gap step: gap sum, flipped tokens, flipped pairs, MoE layers, seconds
        self.live_gap, self.flips, self.flip_pairs, self.moe_layers, self.live_time = 0.0, 0, 0, 0, 0.0

    def record(
        self, backend: UpdateBackend, sample: TrainSample, i: int, logp: torch.Tensor, rollout: bool
    ) -> None:
        """Records sample ``i``'s pre-update log-probs ``logp`` ``[n_loss]``: gap, ratio denominator, weights.

        ``rollout``: the ratio's denominator is the rollout's log-probs (else ``logp`` itself).
        """
        ppo = backend.ppo
        correction = OFF_POLICY_CORRECTIONS.load(ppo.off_policy.kind)
        pos = torch.nonzero(loss_mask_tensor(sample, backend.device)).flatten()
        at_rollout = _rollout_at(sample, pos, backend.device)
        logp = logp.detach()
        self.gap_sum += float((logp - at_rollout).abs().sum())
        self.pre[i] = (logp, at_rollout)
        self.old[i] = at_rollout if rollout else logp
        if correction.active:
            log_ratio = logp.float() - at_rollout
            self.weights[i], hit = correction.weights(log_ratio, torch.ones_like(logp), ppo.off_policy)
            self.affected += int(hit.sum())
            self.weight_sum += float(self.weights[i].sum())

    def add_live(self, backend: UpdateBackend, sample: TrainSample) -> None:
        """Measures `live_gap` on ``sample`` (pre-update weights: the step's first pass) and adds it up."""
        tg = time.perf_counter()
        g, f, p, self.moe_layers = live_gap(backend, sample)
        self.live_gap, self.flips, self.flip_pairs = self.live_gap + g, self.flips + f, self.flip_pairs + p
        self.live_time += time.perf_counter() - tg

    def live(self) -> tuple[float, int, int, int, float]:
        """The live-routing figures in `actor_summary`'s order."""
        return self.live_gap, self.flips, self.flip_pairs, self.moe_layers, self.live_time


def update_actor(
    backend: UpdateBackend,
    samples: Sequence[TrainSample],
    advantages: Sequence[np.ndarray],
    *,
    old_logprobs: OldLogprobs = "recomputed",
) -> dict[str, Any]:
    """Clipped-surrogate update of the actor, R3 replaying each sample's routing (T1 §4.3, §4.5).

    No KL, no load-balancing loss, no advantage normalization (T1 §4.5, §5.2). A sample whose routing
    record is missing or misaligned is aborted (not trained with live routing) and reported. The ratio's
    old log-probs are those of the policy that drew the sample (T1 Appendix 12, `t1_trainer.step`):
    ``recomputed`` (staleness 0) takes the actor's own pre-update log-probs from the first pass's forward
    (same weights, same replayed routing), so pass 1 has ratio exactly 1; ``rollout`` (staleness >= 1)
    takes ``sample.rollout_logprobs``, the behaviour policy ``pi^r_{t-1}``, so pass 1 has ratio
    ``exp(log p_trainer - log p_rollout)``. The gap to the rollout log-probs is measured on the first
    pass's forward either way (at staleness 1 it includes the one update between the two versions).
    With ``ppo.off_policy`` on (`t1_trainer.off_policy`), the ratio's old log-probs are ``recomputed``
    for every sample and each loss token's term is weighted by the correction of
    ``log p_trainer - log p_rollout`` from that same first forward; the weights stay fixed over passes.

    Args:
        backend: the hooks (`UpdateBackend`).
        samples: the batch.
        advantages: float ``[T]`` per sample (0 at masked positions).
        old_logprobs: ``recomputed`` or ``rollout``, as above, for the whole batch, or one of them per
            sample (a batch whose continued samples are older than the rest, `t1_trainer.step`).

    Returns:
        ``actor/policy_loss``, ``actor/clip_fraction``, ``actor/approx_kl``, ``actor/approx_kl_k3``,
        ``actor/ratio_mean``, ``actor/ratio_min``, ``actor/ratio_max`` (last pass; token-weighted over
        the batch), ``actor/policy_loss_first``, ``actor/grad_norm`` (mean over passes, before clipping),
        ``actor/logprob_gap_replay`` (mask-weighted mean ``|log p_trainer - log p_rollout|`` on loss
        tokens, measured on the first, pre-update forward with replay on), ``actor/logprob_gap_no_replay``
        (the same with live routing: with replay on, an extra no-grad forward per sample on the steps
        `gap_due` names, absent on the others; with replay off, the step's own forward, every step),
        ``actor/routing_flip_fraction`` and ``actor/routing_flip_fraction_layers`` (loss tokens, and
        (loss token, MoE layer) pairs, whose live experts differ from the record; gap steps only),
        ``actor/gap_time_s`` (seconds of those extra forwards; gap steps only),
        ``samples_aborted_routing``, ``routing_errors`` (list of str), ``actor/loss_tokens``,
        ``actor/time_s``. With a correction on: ``actor/off_policy_weight_mean`` (mean weight over loss
        tokens) and ``actor/off_policy_truncated_fraction`` (``tis``) or
        ``actor/off_policy_masked_fraction`` (``icepop``), shares of the loss tokens.
        Eq. 25 (`t1_trainer.mismatch`): ``actor/mismatch_kernel``, ``actor/mismatch_version`` and
        ``actor/mismatch_decomposed_fraction`` (one-version-stale samples decomposed only on gap steps of a
        backend that keeps the behaviour weights, `UpdateBackend.snapshot_actor`).

    Raises:
        TrainerConfigError: ``old_logprobs`` (or one of its entries) is neither ``recomputed`` nor
            ``rollout``, or a per-sample list of another length than ``samples``, or asks for
            ``rollout`` while ``ppo.off_policy`` is on (the correction's weight would count the
            mismatch twice).
        NonFiniteUpdateError: from the optimizer step (`UpdateBackend.optimizer_step`).
    """
    t0 = time.perf_counter()
    ppo = backend.ppo
    from_rollout = behaviour_sources(old_logprobs, len(samples))
    correction = OFF_POLICY_CORRECTIONS.load(ppo.off_policy.kind)
    if correction.active and any(from_rollout):
        raise TrainerConfigError(
            f"update_actor old_logprobs 'rollout' with ppo.off_policy.kind {ppo.off_policy.kind!r}: "
            "the correction already weights by pi_trainer / pi_rollout over the recomputed log-probs; "
            "pass old_logprobs 'recomputed' (t1_trainer.step does when the step's spec has it on)"
        )
    with backend.running("actor"):
        errors = backend.routing_errors(samples)
        keep = [i for i in range(len(samples)) if i not in errors]
        masks = {i: loss_mask_tensor(samples[i], backend.device) for i in keep}
        n_tok = float(sum(int(masks[i].sum()) for i in keep))
        batches = micro_batches(samples, keep, ppo)
        n_loss = loss_token_count(backend, n_tok)
        measure_gap = gap_due(ppo, backend.logprob_gap_every, backend.actor_updates)
        backend.actor_updates += 1
        version = int(backend.policy_version)
        # the next gap step decomposes its stale samples' mismatch with these pre-update weights (Eq. 25)
        due_next = gap_due(ppo, backend.logprob_gap_every, backend.actor_updates)
        pre_state = backend.snapshot_actor() if due_next else None
        first = _FirstPass()
        norms: list[float] = []
        out: dict[str, Any] = {}
        backend.actor.train()
        pos = [{i: torch.nonzero(masks[i]).flatten() for i in mb.indices} for mb in batches]
        for epoch in range(ppo.ppo_epochs):
            backend.zero_grad("actor")
            acc = PassMetrics()
            loss_of = partial(_actor_loss, backend, samples, batches, pos, advantages, epoch, from_rollout)
            results = run_micro_batches(
                backend, "actor", batches, partial(loss_of, n_loss, first), replay=ppo.routing_replay
            )
            for j, (mb, (loss, met)) in enumerate(zip(batches, results, strict=True)):
                acc.add(loss, met, sum(int(p.numel()) for p in pos[j].values()))
                if epoch == 0 and measure_gap:  # still the pre-update weights: the step comes below
                    for i in mb.indices:
                        first.add_live(backend, samples[i])
            norms.append(backend.optimizer_step("actor"))
            backend.version += 1
            if epoch == 0:
                out["actor/policy_loss_first"] = acc.loss
            out.update(acc.result())
        live = first.live() if measure_gap else None
        out.update(actor_summary(ppo.routing_replay, norms, first.gap_sum, n_tok, errors, t0, live))
        out.update(_mismatch(backend, samples, first.pre, version, measure_gap))
    backend.behaviour_weights = None if pre_state is None else (version, pre_state)
    if correction.active:
        out[correction.metric] = first.affected / n_tok if n_tok else float("nan")
        out["actor/off_policy_weight_mean"] = first.weight_sum / n_tok if n_tok else float("nan")
    return out


def _actor_loss(
    backend: UpdateBackend,
    samples: Sequence[TrainSample],
    batches: Sequence[MicroBatch],
    positions: Sequence[dict[int, torch.Tensor]],
    advantages: Sequence[np.ndarray],
    epoch: int,
    from_rollout: Sequence[bool],
    n_tok: float,
    first: _FirstPass,
    j: int,
    logp: torch.Tensor,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss of micro-batch ``j`` from its log-probs ``logp``; on the first pass, records into ``first``.

    ``positions[j]`` holds each of its samples' loss positions; ``n_tok`` is the token mean's
    denominator: the batch's loss tokens (`loss_token_count`). A packed micro-batch's loss is its samples'
    per-token terms concatenated over that denominator: the sum of their unpacked losses. Returns the
    micro-batch's loss (its share of the batch's token mean) and its `ppo_policy_loss` metrics.
    """
    ppo, device, mb, pos = backend.ppo, backend.device, batches[j], positions[j]
    adv = mb.cat(
        [torch.as_tensor(advantages[i], device=device, dtype=torch.float32)[pos[i]] for i in mb.indices]
    )
    if epoch == 0:
        for i, part in zip(mb.indices, mb.split_loss_tokens(logp), strict=True):
            first.record(backend, samples[i], i, part, from_rollout[i])
    weights = [first.weights.get(i) for i in mb.indices]
    return ppo_policy_loss(
        logp,
        mb.cat([first.old[i] for i in mb.indices]),
        adv,
        torch.ones_like(adv),
        clip_eps=ppo.clip_eps,
        num_tokens=n_tok,
        is_weights=None if weights[0] is None else mb.cat(weights),
    )


def live_gap(backend: UpdateBackend, sample: TrainSample) -> tuple[float, int, int, int]:
    """One no-grad actor forward with live routing, compared with the rollout and its routing record.

    Returns:
        ``(sum |log p_live - log p_rollout| over loss tokens (nats), loss tokens whose scoring position
        routes to another expert set than recorded in at least one MoE layer, such (token, layer) pairs,
        MoE layers)``; the flip counts are 0 when the sample has no routing record (T1 §4.3, Fig. 6).
    """
    pos = torch.nonzero(loss_mask_tensor(sample, backend.device)).flatten()
    rollout = _rollout_at(sample, pos, backend.device)
    live, live_rows = backend.live_routing(sample)
    gap = float((live - rollout).abs().sum())
    if sample.routing is None:
        return gap, 0, 0, live_rows.shape[1]
    rows = (pos - 1).cpu().numpy()  # token j is scored by the forward at position j - 1
    recorded = np.sort(routing_array(sample.routing)[rows].astype(np.int64), axis=2)
    differ = (np.sort(live_rows[rows].astype(np.int64), axis=2) != recorded).any(axis=2)  # [n, L]
    return gap, int(differ.any(axis=1).sum()), int(differ.sum()), live_rows.shape[1]


def logprob_gap(backend: UpdateBackend, samples: Sequence[TrainSample]) -> dict[str, float]:
    """The train-inference gap of the current actor on ``samples``, with and without replay; no update.

    Mask-weighted means over loss tokens (T1 §4.3, Fig. 6): ``actor/logprob_gap_replay`` (recorded
    routing replayed, whatever ``ppo.routing_replay`` says), ``actor/logprob_gap_no_replay`` (live
    routing), ``actor/routing_flip_fraction`` (loss tokens whose scoring position routes live to another
    expert set than the record in at least one MoE layer) and ``actor/routing_flip_fraction_layers`` (the
    same over (token, MoE layer) pairs), ``actor/loss_tokens``. Two no-grad forwards per sample. Samples
    without a record, or (replay on) whose record cannot be replayed, are skipped.

    Raises:
        SampleError: a sample's streams are inconsistent (`check_sample`).
    """
    errors = backend.routing_errors(samples) if backend.ppo.routing_replay else {}
    n_tok = gap_r = gap_l = 0.0
    flips = pairs = layers = 0
    with backend.running("actor"):
        for i, s in enumerate(samples):
            if i in errors or s.routing is None:
                continue
            check_sample(s)
            pos = torch.nonzero(loss_mask_tensor(s, backend.device)).flatten()
            rollout = _rollout_at(s, pos, backend.device)
            with torch.no_grad(), backend.replayed(s):
                gap_r += float((backend.actor_logprobs(s) - rollout).abs().sum())
            g, f, p, layers = live_gap(backend, s)
            gap_l, flips, pairs, n_tok = gap_l + g, flips + f, pairs + p, n_tok + int(pos.numel())
    nan = float("nan")
    return {
        "actor/logprob_gap_replay": gap_r / n_tok if n_tok else nan,
        "actor/logprob_gap_no_replay": gap_l / n_tok if n_tok else nan,
        "actor/routing_flip_fraction": flips / n_tok if n_tok else nan,
        "actor/routing_flip_fraction_layers": pairs / (n_tok * layers) if n_tok and layers else nan,
        "actor/loss_tokens": int(n_tok),
    }


def _mismatch(
    backend: UpdateBackend,
    samples: Sequence[TrainSample],
    pre: dict[int, tuple[torch.Tensor, torch.Tensor]],
    version: int,
    due: bool,
) -> dict[str, float]:
    """Eq. 25's terms (`t1_trainer.mismatch`); one-version-stale samples scored with the kept copy."""
    held = backend.behaviour_weights if due else None
    behaviour: dict[int, torch.Tensor] = {}
    stale = [i for i in pre if version - int(samples[i].policy_version) == 1]
    stale = [i for i in stale if not getattr(samples[i], "policy_versions_mixed", False)]
    if held is not None and held[0] == version - 1 and stale:
        with torch.no_grad(), backend.swapped_actor(held[1]):
            for i in stale:
                with backend.replayed(samples[i]) if backend.ppo.routing_replay else nullcontext():
                    behaviour[i] = backend.actor_logprobs(samples[i])
    ages = {i: version - int(samples[i].policy_version) for i in pre}
    return mismatch_terms([(t, behaviour.get(i), r, ages[i]) for i, (t, r) in pre.items()])
