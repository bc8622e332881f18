"""The batch-level part of a data-parallel step, decided once, where the whole batch is (T1 §4.5).

A data-parallel step (`t1_trainer.data_parallel`) has two parts. The batch-level part needs the whole batch
but no weights: the stream checks (`t1_trainer.samples.check_sample`), the staleness check
(`t1_trainer.step.check_staleness`, against the trainer's policy version), the routing records' check
against the model's router geometry (R3, T1 §4.3: a record that cannot be replayed aborts its sample), and
the token-balanced shard of the trainable samples (`t1_trainer.distributed.shard_by_tokens`). Its result is
a `ShardPlan`: per rank, the batch positions of its shard, plus the few batch-level values the ranks'
metrics need (the batch size, the staleness metrics, the aborted samples' messages). The rank-level part
(`t1_trainer.data_parallel.data_parallel_ppo_shard_step`) trains one shard.

A Ray run's driver plans each step itself (`t1.run.ray.trainer_group`), so a refusal is raised there before
any rank is called, and each rank receives only its shard and the plan. The routing check here is the one
`t1_trainer.torch_backend.TorchBackend.routing_errors` calls, so the driver's aborts and messages are the
backend's on a model of the same geometry (`RouterGeometry`, read once from a rank's actor by
`router_geometry`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from torch import nn

from t1_spec import GAEAdvantageSpec, PPOSpec
from t1_trainer.distributed import shard_by_tokens
from t1_trainer.errors import TrainerConfigError
from t1_trainer.samples import TrainSample, check_sample, routing_array, sample_name
from t1_trainer.step import check_staleness

__all__ = [
    "RouterGeometry",
    "ShardPlan",
    "geometry_routing_errors",
    "plan_critic_warmup_step",
    "plan_ppo_step",
    "router_geometry",
]


@dataclass(frozen=True)
class RouterGeometry:
    """The actor's MoE routers as a routing record must fit them: ``[T-1, num_layers, top_k]``, ids < E."""

    num_layers: int
    top_k: int
    num_experts: int


def router_geometry(actor: nn.Module) -> RouterGeometry:
    """The geometry of ``actor``'s MoE routers (`t1_r3.families.find_routers`).

    Raises:
        ValueError: no registered router family in the model.
    """
    from t1_r3.families import find_routers

    routers = find_routers(actor)
    first = routers[0].module
    return RouterGeometry(len(routers), int(first.top_k), int(first.num_experts))


def geometry_routing_errors(
    samples: Sequence[TrainSample], geometry: RouterGeometry | None
) -> dict[int, str]:
    """Index -> reason for each sample whose routing record does not fit ``geometry`` (None: replay off).

    The torch backend's routing check (`TorchBackend.routing_errors` calls it): the record against its
    tokens, then against the routers, without a model.
    """
    if geometry is None:
        return {}
    from t1_r3 import RoutingMismatchError, check_routing

    errors: dict[int, str] = {}
    for i, s in enumerate(samples):
        name = sample_name(s)
        if s.routing is None:
            errors[i] = f"sample {name}: routing record missing; R3 cannot replay it (T1 §4.3: aborted)"
            continue
        try:
            rec = routing_array(s.routing)
            check_routing(rec, num_tokens=len(s.token_ids))
            check_routing(
                rec,
                num_tokens=rec.shape[0] + 1,
                num_layers=geometry.num_layers,
                top_k=geometry.top_k,
                num_experts=geometry.num_experts,
            )
        except RoutingMismatchError as e:
            errors[i] = f"sample {name}: {e} (aborted)"
    return errors


@dataclass(frozen=True)
class ShardPlan:
    """One data-parallel step's batch-level decisions; the same for every rank.

    Attributes:
        shards: per rank, in rank order, the batch positions of its samples (ascending, non-empty).
        batch_size: samples in the whole batch (``trainer/samples``).
        versions: `check_staleness`'s metrics of the whole batch (empty for the critic warm-up).
        routing_errors: batch position -> message of each sample aborted for its routing record.
    """

    shards: list[list[int]]
    batch_size: int
    versions: dict[str, Any] = field(default_factory=dict)
    routing_errors: dict[int, str] = field(default_factory=dict)


def _shards(
    samples: Sequence[TrainSample], indices: Sequence[int], world_size: int, what: str
) -> list[list[int]]:
    """The token-balanced shards of ``samples[indices]``, as batch positions.

    Raises:
        TrainerConfigError: fewer samples than ranks (a rank with no micro-batch could not join the sum).
    """
    shards = shard_by_tokens([len(samples[i].token_ids) for i in indices], world_size)
    if any(not s for s in shards):
        raise TrainerConfigError(
            f"{what}: {len(indices)} trainable samples for {world_size} data-parallel ranks; "
            "every rank needs at least one (raise ppo.batch_size or lower the rank count)"
        )
    return [[indices[j] for j in shard] for shard in shards]


def plan_ppo_step(
    samples: Sequence[TrainSample],
    ppo_spec: PPOSpec,
    world_size: int,
    *,
    policy_version: int,
    routing_errors: Callable[[Sequence[TrainSample]], dict[int, str]],
    staleness: int = 0,
    continuation_lag: int = 0,
    max_staleness: int | None = None,
) -> ShardPlan:
    """The batch-level part of `data_parallel_ppo_step`: checks in order, then the shard of the kept samples.

    Args:
        samples: the whole batch.
        ppo_spec: the recipe's PPO spec; its estimator must be GAE.
        world_size: ranks in the group.
        policy_version: the trainer's policy version (the staleness check's reference).
        routing_errors: the routing check (a backend's ``routing_errors``, or `geometry_routing_errors`
            bound to the ranks' `RouterGeometry`).
        staleness: as `t1_trainer.step.ppo_step`.
        continuation_lag: as `t1_trainer.step.ppo_step`.
        max_staleness: as `t1_trainer.step.ppo_step`.

    Raises:
        TrainerConfigError: a non-GAE estimator, or fewer trainable samples than ranks.
        SampleError, StalenessError: as `ppo_step`.
    """
    if not isinstance(ppo_spec.advantage, GAEAdvantageSpec):
        raise TrainerConfigError(
            f"data_parallel_ppo_step: advantage.estimator {ppo_spec.advantage.estimator!r} over ranks is not "
            "built (its groups would be split across shards); use gae or one rank"
        )
    for s in samples:
        check_sample(s)
    versions = check_staleness(
        SimpleNamespace(policy_version=int(policy_version)),
        samples,
        staleness,
        continuation_lag=continuation_lag,
        max_staleness=max_staleness,
    )
    errors = routing_errors(samples)
    kept = [i for i in range(len(samples)) if i not in errors]
    shards = _shards(samples, kept, world_size, "data_parallel_ppo_step")
    return ShardPlan(shards, len(samples), dict(versions), dict(errors))


def plan_critic_warmup_step(samples: Sequence[TrainSample], world_size: int) -> ShardPlan:
    """The batch-level part of `data_parallel_critic_warmup_step`: the stream checks, then the shard.

    Raises:
        SampleError: as `check_sample`.
        TrainerConfigError: fewer samples than ranks.
    """
    for s in samples:
        check_sample(s)
    shards = _shards(samples, list(range(len(samples))), world_size, "data_parallel_critic_warmup_step")
    return ShardPlan(shards, len(samples))
