"""Data parallel for the torch backend: each rank trains a token-balanced shard, DDP sums the gradients.

Why DDP and not FSDP2 ``fully_shard``: the torch backend is the backend of models that fit one device (the
embedded CPU model, small GPU models); models that do not are Megatron's (TP/PP/EP/CP, `t1_trainer.megatron`).
What data parallel has to buy here is batch throughput, not memory, and DDP does it with every weight left
a plain replicated tensor, so everything the backend does with its weights outside the loss stays as it is:
the chunked LM head reads ``lm_head.weight`` directly (`t1_trainer.logprobs`), R3 replays routing through
hooks on the routers, the Eq. 25 split snapshots and swaps the actor's weights, and publication exports a
plain state dict. Under ``fully_shard`` each of these would see sharded DTensors outside the module's own
forward (the head's weight is read outside ``lm_head.forward``), and publication would need a gather. FSDP2
also runs on CPU over gloo (its collectives are all-gather and reduce-scatter), so the choice is not forced by
the CPU; it is the simpler machinery for the need.

How the arithmetic matches one rank (`t1_trainer.update`):

* Loss normalization. The update's loss is a token mean over the whole batch, accumulated one sample per
  micro-batch: each sample's loss is its token sum divided by the batch's loss tokens. Every rank divides by
  the group's loss-token count (``group_loss_tokens``, an all-reduce), and DDP's comm hook here sums the
  gradients (DDP's own averages over ranks), so the group's gradient is the one-rank gradient up to the
  order of the fp32 additions.
* Micro-batches. All of a pass's micro-batches but the last run under DDP's ``no_sync`` (``accumulating``);
  the last one's backward sums the accumulated gradients over the group, once per optimizer step. Ranks may
  hold different sample counts. DDP runs with ``find_unused_parameters``: under R3 an expert no token of a
  rank's shard routes to has no gradient there.
* Clipping and the step. After the sum every rank holds the same gradient, so
  `t1_trainer.optim.clip_and_step` clips by the global norm across ranks and every replica takes the same
  AdamW step; the non-finite guard fires on every rank alike.
* Metrics. `data_parallel_ppo_step` gathers each rank's metrics row and reduces it (`reduce_metrics`): sums
  for counts and for losses (each rank's loss is its share of the global mean), token-weighted means for the
  per-token means (the log-prob gaps, clip fractions, ratios, value and return means), extremes for the
  ratio's min and max; explained variance (T1 Eq. 19) is computed on the gathered values and returns of the
  whole batch (``group_explained_variances``). Every rank returns the same row; rank 0's equals the one-rank
  row to fp32 reduction-order tolerance.

Deterministic refusals (inconsistent streams, staleness, routing records, fewer trainable samples than
ranks) are decided on the whole batch before the first collective (`t1_trainer.shard_plan`): by the caller
that holds the batch (a Ray run's driver plans once and sends each rank only its shard and the plan,
`data_parallel_ppo_shard_step`), or by every rank alike (`data_parallel_ppo_step`, every rank given the whole
batch), so no rank waits on another that refused. A rank that dies makes the others' next collective fail
with a `t1_trainer.distributed.CollectiveError` within the group's deadline.

Built: this library piece (`DataParallelTorchBackend`, `data_parallel_ppo_step` and
`data_parallel_critic_warmup_step` on the whole batch, their shard-only forms `data_parallel_ppo_shard_step`
and `data_parallel_critic_warmup_shard_step`), and its use by a Ray run's trainer ranks
(``runtime.ray.trainer_workers`` > 1, `t1.run.ray.trainer_group`: placement, rendezvous, the plan made in
the driver and each rank's shard sent to it, publication and checkpoints from rank 0). Packed micro-batches
(`t1_trainer.packing`) run through the DDP wrappers unchanged: each rank packs its own shard. Not built: the
GRPO estimator over ranks (its groups would be split across shards; the run refuses it by name).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from contextlib import AbstractContextManager
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from t1_spec import PPOSpec, Recipe
from t1_trainer.algorithms import explained_variances
from t1_trainer.distributed import RankGroup
from t1_trainer.errors import TrainerConfigError
from t1_trainer.samples import TrainSample, loss_mask_tensor, token_tensor
from t1_trainer.shard_plan import ShardPlan, plan_critic_warmup_step, plan_ppo_step
from t1_trainer.step import StepMetrics, critic_warmup_step, ppo_step
from t1_trainer.torch_backend import TorchBackend, loss_token_logprobs
from t1_trainer.update import Network

__all__ = [
    "DataParallelTorchBackend",
    "HookState",
    "data_parallel_critic_warmup_shard_step",
    "data_parallel_critic_warmup_step",
    "data_parallel_ppo_shard_step",
    "data_parallel_ppo_step",
    "reduce_metrics",
    "sum_gradients_hook",
]


class HookState:
    """The comm hook's state: the failure of its last all-reduce, if any (None: none failed)."""

    def __init__(self) -> None:
        self.failure: BaseException | None = None


def sum_gradients_hook(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP comm hook: all-reduce SUM of a gradient bucket, not DDP's default mean over ranks.

    Each rank's loss is already divided by the group's loss-token count, so the sum is the batch's gradient.
    A failed all-reduce is recorded in ``state`` (a `HookState`), so the backward that raises it is told
    apart from one that fails for another reason.
    """
    fut = dist.all_reduce(bucket.buffer(), op=dist.ReduceOp.SUM, async_op=True).get_future()

    def summed(f: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
        try:
            return f.value()[0]
        except Exception as e:
            if isinstance(state, HookState):
                state.failure = e
            raise

    return fut.then(summed)


# DDP checks a hook's annotations against the classes themselves, not the strings this module's
# ``from __future__ import annotations`` leaves
sum_gradients_hook.__annotations__ = {
    "state": Any,
    "bucket": dist.GradBucket,
    "return": torch.futures.Future[torch.Tensor],
}


class _ActorHead(nn.Module):
    """The actor's loss-token log-probs as one module: DDP prepares the gradient sum in its forward."""

    def __init__(self, actor: nn.Module, temperature: float, vocab_limit: int) -> None:
        super().__init__()
        self.actor, self.temperature, self.vocab_limit = actor, temperature, vocab_limit

    def forward(self, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return loss_token_logprobs(self.actor, ids, pos, self.temperature, self.vocab_limit)


class DataParallelTorchBackend(TorchBackend):
    """`TorchBackend` on one rank of a data-parallel group: DDP over the actor and the critic.

    Every rank builds the same weights (same spec and seed; DDP also broadcasts rank 0's at construction)
    and trains the shard `data_parallel_ppo_step` gives it. The hooks `t1_trainer.update` looks for
    (``group_loss_tokens``, ``accumulating``, ``group_explained_variances``) make the group's update the
    one-rank update of the whole batch (module docstring).

    Args:
        group: the joined `t1_trainer.distributed.RankGroup`.
        **kwargs: `TorchBackend`'s arguments (``model_spec``, ``ppo_spec``, ``seed``, ``device``, ...).

    Raises:
        TrainerConfigError: the group is not joined, or what `TorchBackend` raises.
    """

    def __init__(self, group: RankGroup, **kwargs: Any) -> None:
        if not group.joined:
            raise TrainerConfigError(
                f"DataParallelTorchBackend: rank {group.rank} has not joined its group; "
                "call group.join() first"
            )
        super().__init__(**kwargs)
        self.group = group
        self.positions: list[int] = []  # the local samples' places in the batch, for the gathered EV's order
        ids = [self.device.index] if self.device.type == "cuda" else None
        with group.collective("DDP's broadcast of the initial weights"):
            self.actor_ddp = DistributedDataParallel(
                _ActorHead(self.actor, self.temperature, self.vocab_limit),
                device_ids=ids,
                forward_sync_buffers=False,  # a broadcast in every forward would need equal forward counts
                find_unused_parameters=True,
            )
            self.critic_ddp = DistributedDataParallel(
                self.critic, device_ids=ids, forward_sync_buffers=False, find_unused_parameters=True
            )
        self.hook_state = HookState()
        self.actor_ddp.register_comm_hook(self.hook_state, sum_gradients_hook)
        self.critic_ddp.register_comm_hook(self.hook_state, sum_gradients_hook)

    @classmethod
    def for_rank(
        cls, group: RankGroup, recipe: Recipe, *, actor: nn.Module | None = None
    ) -> DataParallelTorchBackend:
        """This rank's backend of ``recipe``: `TorchBackend.from_spec`'s arguments, over ``group``.

        Raises:
            TrainerConfigError: as the class.
        """
        return TorchBackend.from_spec.__func__(functools.partial(cls, group), recipe, actor=actor)

    def _ddp(self, network: Network) -> DistributedDataParallel:
        return self.actor_ddp if network == "actor" else self.critic_ddp

    # ---- the data-parallel hooks of t1_trainer.update ----

    def group_loss_tokens(self, n_local: float) -> float:
        """The whole batch's loss tokens: the sum of every rank's ``n_local``."""
        return self.group.all_sum(n_local, "the loss-token count's all-reduce")

    def accumulating(self, network: Network) -> AbstractContextManager[None]:
        """DDP's ``no_sync`` on ``network``: the micro-batch's gradient stays local until the pass's last."""
        return self._ddp(network).no_sync()

    def group_explained_variances(
        self, samples: Sequence[TrainSample], values: Sequence[np.ndarray], returns: Sequence[np.ndarray]
    ) -> tuple[float, float]:
        """`t1_trainer.algorithms.explained_variances` over every rank's samples, in batch order."""
        positions = self.positions if len(self.positions) == len(samples) else list(range(len(samples)))
        mine = [
            (p, np.asarray(s.loss_mask), str(s.trial_id), int(getattr(s, "chunk_index", 0)), v, r)
            for p, s, v, r in zip(positions, samples, values, returns, strict=True)
        ]
        rows = sorted(
            (row for part in self.group.all_gather(mine, "the explained variance's gather") for row in part),
            key=lambda row: row[0],
        )
        batch = [SimpleNamespace(loss_mask=m, trial_id=t, chunk_index=c) for _, m, t, c, _, _ in rows]
        return explained_variances(batch, [row[4] for row in rows], [row[5] for row in rows])

    # ---- TorchBackend's hooks, through DDP ----

    def critic_values(self, sample: TrainSample) -> torch.Tensor:
        """Critic values ``[T]`` float32 with grad, through the critic's DDP wrapper."""
        return self.critic_ddp(token_tensor(sample, self.device))

    def actor_logprobs(self, sample: TrainSample) -> torch.Tensor:
        """Loss-token log-probs ``[n_loss]`` float32 with grad, through the actor's DDP wrapper."""
        ids = token_tensor(sample, self.device)
        pos = torch.nonzero(loss_mask_tensor(sample, self.device)).flatten()
        return self.actor_ddp(ids, pos)

    def backward(self, loss: torch.Tensor, network: Network) -> None:
        """``loss.backward()``; outside ``accumulating`` it sums the group's gradients (DDP's comm hook).

        Raises:
            CollectiveError: the gradient sum failed (a peer died or the deadline passed); any other error
                of the backward propagates as it is.
        """
        self.hook_state.failure = None
        try:
            loss.backward()
        except RuntimeError as e:
            if self.hook_state.failure is None:
                raise
            raise self.group.error(f"the {network}'s gradient all-reduce", e) from e


def _weighted(rows: Sequence[StepMetrics], key: str, weight: str) -> float:
    """Token-weighted mean of ``key`` over the rows holding it; ranks without tokens are left out."""
    pairs = [(float(r[key]), float(r.get(weight, 0))) for r in rows if key in r]
    pairs = [(v, w) for v, w in pairs if w > 0]
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total else float("nan")


_SUMS = {
    "trainer/loss_tokens",
    "actor/loss_tokens",
    "critic/value_loss",
    "critic/value_loss_last",
    "actor/policy_loss",
    "actor/policy_loss_first",
}
"""Counts, and losses (each rank's loss is its share of the batch's token mean)."""
_SAME = {
    "critic/grad_norm",
    "actor/grad_norm",
    "critic/explained_variance",
    "critic/ev_token_pre",
    "critic/ev_trajectory_pre",
    "critic/ev_token_post",
    "critic/ev_trajectory_post",
}
"""Equal on every rank: norms of the summed gradient, explained variances of the gathered batch."""
_CRITIC_MEANS = {
    "trainer/advantage_mean",
    "critic/value_mean",
    "critic/return_mean",
    "critic/value_clip_fraction",
}
"""Means over the step's loss tokens (weight: each rank's ``trainer/loss_tokens``)."""
_ACTOR_MEANS = {
    "actor/clip_fraction",
    "actor/approx_kl",
    "actor/approx_kl_k3",
    "actor/ratio_mean",
    "actor/logprob_gap_replay",
    "actor/logprob_gap_no_replay",
    "actor/routing_flip_fraction",
    "actor/routing_flip_fraction_layers",
    "actor/off_policy_weight_mean",
    "actor/off_policy_truncated_fraction",
    "actor/off_policy_masked_fraction",
    "actor/mismatch_decomposed_fraction",
}
"""Means over the actor's loss tokens (weight: each rank's ``actor/loss_tokens``)."""
_MISMATCH = {"actor/mismatch_kernel", "actor/mismatch_version"}
"""Means over the decomposed tokens (weight: loss tokens x decomposed fraction, `t1_trainer.mismatch`)."""


def reduce_metrics(rows: Sequence[StepMetrics]) -> StepMetrics:
    """One metrics row from every rank's `ppo_step` row, as one rank would have logged the whole batch.

    Args:
        rows: per rank, in rank order, the metrics of its shard (`t1_trainer.step.ppo_step` or
            `critic_warmup_step` run by a `DataParallelTorchBackend`).

    Returns:
        Sums of counts and losses, token-weighted means of per-token means, the ratio's extremes, the
        slowest rank's times, rank 0's value of what every rank holds alike (grad norms, explained
        variances), routing errors in rank order.

    Raises:
        TrainerConfigError: a metric this function has no rule for (a new metric needs one here).
    """
    out: StepMetrics = {}
    for key in dict.fromkeys(k for r in rows for k in r):
        held = [r[key] for r in rows if key in r]
        if key in _SUMS or key in ("trainer/samples", "samples_aborted_routing", "samples_versions_mixed"):
            out[key] = type(held[0])(sum(held))
        elif key in _SAME or key in ("trainer/policy_version", "staleness", "staleness_min"):
            out[key] = held[0]
        elif key in _CRITIC_MEANS:
            out[key] = _weighted(rows, key, "trainer/loss_tokens")
        elif key in _ACTOR_MEANS:
            out[key] = _weighted(rows, key, "actor/loss_tokens")
        elif key in _MISMATCH:
            done = [
                {**r, "_done": r["actor/loss_tokens"] * r["actor/mismatch_decomposed_fraction"]} for r in rows
            ]
            out[key] = _weighted([d for d in done if key in d], key, "_done")
        elif key == "actor/ratio_min":
            out[key] = min(held)
        elif key == "actor/ratio_max":
            out[key] = max(held)
        elif key.endswith("time_s"):
            out[key] = max(held)
        elif key == "routing_errors":
            out[key] = [e for errors in held for e in errors]
        elif key == "staleness_loss_token_share":
            out[key] = held[0]  # replaced by the whole batch's in the data-parallel steps
        else:
            raise TrainerConfigError(
                f"reduce_metrics: no rule to reduce metric {key!r} over ranks; "
                "add one to t1_trainer.data_parallel"
            )
    return out


def data_parallel_ppo_shard_step(
    backend: DataParallelTorchBackend,
    shard: Sequence[TrainSample],
    plan: ShardPlan,
    ppo_spec: PPOSpec,
    *,
    staleness: int = 0,
    continuation_lag: int = 0,
    max_staleness: int | None = None,
) -> StepMetrics:
    """This rank's part of a group PPO step (T1 §4.5): `ppo_step` on its shard, then the metrics' reduction.

    Args:
        backend: this rank's `DataParallelTorchBackend`.
        shard: the batch's samples at ``plan.shards[rank]``, in that order (the rank holds no other).
        plan: the step's `t1_trainer.shard_plan.ShardPlan` (`plan_ppo_step`), the same on every rank.
        ppo_spec: the recipe's PPO spec (GAE).
        staleness: as `t1_trainer.step.ppo_step`.
        continuation_lag: as `t1_trainer.step.ppo_step`.
        max_staleness: as `t1_trainer.step.ppo_step`.

    Returns:
        As `data_parallel_ppo_step`; the same on every rank.

    Raises:
        TrainerConfigError: ``shard`` is not this rank's part of ``plan``.
        CollectiveError: a peer rank died or a collective missed the group's deadline.
        NonFiniteUpdateError: from the optimizer step, on every rank alike.
    """
    group = backend.group
    if len(plan.shards) != group.world_size or len(shard) != len(plan.shards[group.rank]):
        raise TrainerConfigError(
            f"data_parallel_ppo_shard_step: rank {group.rank} of {group.world_size} got {len(shard)} samples "
            f"for a plan of {len(plan.shards)} shards ({[len(s) for s in plan.shards]} samples)"
        )
    backend.positions = list(plan.shards[group.rank])
    row = ppo_step(
        backend,
        shard,
        ppo_spec,
        staleness=staleness,
        continuation_lag=continuation_lag,
        max_staleness=max_staleness,
    )
    rows = group.all_gather(row, "the metrics' gather")
    out = reduce_metrics(rows)  # type: ignore[arg-type]
    out.update(plan.versions)
    out["trainer/samples"] = plan.batch_size
    out["samples_aborted_routing"] += len(plan.routing_errors)
    out["routing_errors"] = [plan.routing_errors[i] for i in sorted(plan.routing_errors)] + out[
        "routing_errors"
    ]
    out["trainer/ranks"] = group.world_size
    return out


def data_parallel_ppo_step(
    backend: DataParallelTorchBackend,
    samples: Sequence[TrainSample],
    ppo_spec: PPOSpec,
    *,
    staleness: int = 0,
    continuation_lag: int = 0,
    max_staleness: int | None = None,
) -> StepMetrics:
    """One PPO step of the group on the whole batch: each rank runs `ppo_step` on its shard (T1 §4.5).

    Every rank calls it with the same ``samples`` (the whole batch) and arguments, and plans the step
    itself (`t1_trainer.shard_plan.plan_ppo_step`: streams, staleness, routing records, then the shard of
    the trainable samples) before `data_parallel_ppo_shard_step` trains its shard. A caller that holds the
    batch where the ranks are not (a Ray run's driver) plans once and sends each rank its shard instead.

    Args:
        backend: this rank's `DataParallelTorchBackend`.
        samples: the whole batch, identical on every rank.
        ppo_spec: the recipe's PPO spec; its estimator must be GAE.
        staleness: as `t1_trainer.step.ppo_step`.
        continuation_lag: as `t1_trainer.step.ppo_step`.
        max_staleness: as `t1_trainer.step.ppo_step`.

    Returns:
        `ppo_step`'s metrics of the whole batch (module docstring), plus ``trainer/ranks``; the same on
        every rank.

    Raises:
        TrainerConfigError: a non-GAE estimator, or fewer trainable samples than ranks.
        SampleError, StalenessError: as `ppo_step`, on every rank alike, before any collective.
        CollectiveError: a peer rank died or a collective missed the group's deadline.
        NonFiniteUpdateError: from the optimizer step, on every rank alike.
    """
    plan = plan_ppo_step(
        samples,
        ppo_spec,
        backend.group.world_size,
        policy_version=int(getattr(backend, "policy_version", 0)),
        routing_errors=backend.routing_errors,
        staleness=staleness,
        continuation_lag=continuation_lag,
        max_staleness=max_staleness,
    )
    shard = [samples[i] for i in plan.shards[backend.group.rank]]
    return data_parallel_ppo_shard_step(
        backend,
        shard,
        plan,
        ppo_spec,
        staleness=staleness,
        continuation_lag=continuation_lag,
        max_staleness=max_staleness,
    )


def data_parallel_critic_warmup_shard_step(
    backend: DataParallelTorchBackend, shard: Sequence[TrainSample], plan: ShardPlan, ppo_spec: PPOSpec
) -> StepMetrics:
    """This rank's part of a group critic warm-up step: `critic_warmup_step` on its shard, then the reduction.

    Args:
        backend: this rank's `DataParallelTorchBackend`.
        shard: the batch's samples at ``plan.shards[rank]`` (`plan_critic_warmup_step`), in that order.
        plan: the step's `t1_trainer.shard_plan.ShardPlan`, the same on every rank.
        ppo_spec: the recipe's PPO spec.

    Raises:
        TrainerConfigError: ``shard`` is not this rank's part of ``plan``.
        CollectiveError: a peer rank died or a collective missed the group's deadline.
    """
    group = backend.group
    if len(plan.shards) != group.world_size or len(shard) != len(plan.shards[group.rank]):
        raise TrainerConfigError(
            f"data_parallel_critic_warmup_shard_step: rank {group.rank} of {group.world_size} got "
            f"{len(shard)} samples for a plan of {[len(s) for s in plan.shards]} samples per shard"
        )
    backend.positions = list(plan.shards[group.rank])
    row = critic_warmup_step(backend, shard, ppo_spec)
    row["trainer/loss_tokens"] = int(sum(np.asarray(s.loss_mask).sum() for s in shard))  # the means' weight
    out = reduce_metrics(group.all_gather(row, "the metrics' gather"))  # type: ignore[arg-type]
    del out["trainer/loss_tokens"]  # not in the one-rank row
    out["trainer/samples"] = plan.batch_size
    out["trainer/ranks"] = group.world_size
    return out


def data_parallel_critic_warmup_step(
    backend: DataParallelTorchBackend, samples: Sequence[TrainSample], ppo_spec: PPOSpec
) -> StepMetrics:
    """The critic warm-up step (`t1_trainer.step.critic_warmup_step`, T1 §4.5) of the group, whole batch.

    Returns:
        `critic_warmup_step`'s metrics of the whole batch plus ``trainer/ranks``; the same on every rank.

    Raises:
        SampleError: on every rank alike, before any collective.
        TrainerConfigError: fewer samples than ranks.
        CollectiveError: a peer rank died or a collective missed the group's deadline.
    """
    plan = plan_critic_warmup_step(samples, backend.group.world_size)
    shard = [samples[i] for i in plan.shards[backend.group.rank]]
    return data_parallel_critic_warmup_shard_step(backend, shard, plan, ppo_spec)
