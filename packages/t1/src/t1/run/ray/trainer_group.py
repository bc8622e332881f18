"""The trainer of a Ray run as a group of ranks: placement, rendezvous, steps, publication from rank 0.

``runtime.ray.trainer_workers = N`` places N actors in the trainer's bundles (`t1.run.ray.placement`). With
N = 1 the one actor is `t1.run.ray.actors.TrainerWorker`, as before. With N > 1 each is a `TrainerRank`:
rank 0 picks the rendezvous (``runtime.ray.trainer_address`` or its node's IP, ``runtime.ray.trainer_port``
or a free port on its node), then every rank joins one ``torch.distributed`` process group
(`t1_trainer.distributed.RankGroup`: gloo on CPU, NCCL on CUDA) whose rendezvous and collectives carry the
deadline ``liveness.collective_timeout_s`` (T1 §7.3), and builds its `t1_trainer.data_parallel`
backend (DDP over the same seeded weights).

Only the driver rolls out, and it plans each step (`t1_trainer.shard_plan`): it checks the whole batch
(streams, staleness against the version it tracks, routing records against rank 0's router geometry) and
computes the token-balanced shards (`t1_trainer.distributed.shard_by_tokens`) before any rank is called, so a
refusal is raised in the driver (`Refused`). Each rank receives only its shard and the plan and trains it, the
gradients summed over the group, so every rank ends the step on the same weights and the same metrics row
(which carries ``trainer/ranks``). The critic warm-up and the critic-then-actor order are `t1_trainer.step`'s,
unchanged. Rank 0 alone publishes (its replicated weights, as `TrainerWorker.publish`; the other ranks then
take the new version for their staleness checks), writes the trainer's part of a checkpoint (the one-process
format: weights, optimizer states, counters, rank 0's RNG) and the final weights; a resume loads the
checkpoint into every rank.

A rank that dies (its process killed, its node lost) fails the step: Ray answers its call with the actor's
death, the other ranks' next collective fails when gloo sees the peer's socket close, or at the group's
deadline at the latest, and `TrainerGroup` raises `TrainerRankLost` naming the dead rank, its cause and
what the others answered; `t1 train --resume` continues from the last checkpoint. Not built: replacing a
lost rank within the run, and FSDP or tensor parallelism across ranks (the ranks are DDP replicas).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from t1.run.ray.actors import CONTROL_DEADLINE_S, TrainerWorker, trainer_policy
from t1_spec import Recipe

if TYPE_CHECKING:
    from t1.run.resume import RunState
    from t1_tito import Sample


class TrainerRankLost(RuntimeError):
    """A trainer rank died or failed its collectives during a step; the step is lost (T1 §7.3)."""


class TrainerRank(TrainerWorker):
    """One rank of the data-parallel trainer (a Ray actor): the policy at construction, the group at `join`.

    Args:
        recipe: the recipe (``trainer.backend: torch``, GAE).
        rank: this actor's rank, ``0 <= rank < world_size``.
        world_size: ranks in the group (``runtime.ray.trainer_workers``).
        actor_weights: the actor file of ``model.checkpoint`` with ``model.init: checkpoint``, else None.
    """

    def __init__(self, recipe: Recipe, rank: int, world_size: int, actor_weights: str | None = None) -> None:
        self.recipe = recipe
        self.rank, self.world_size = int(rank), int(world_size)
        self.policy = trainer_policy(recipe, actor_weights)
        self.group: Any = None
        self.backend: Any = None

    def rendezvous(self, address: str | None, port: int) -> tuple[str, int]:
        """Where the group meets (called on rank 0): ``address`` or this node's IP, ``port`` or a free one.

        A free port is one the OS gives this node now (bound, then released for the group's store to bind).
        """
        import ray

        host = address or ray.util.get_node_ip_address()
        if port:
            return host, int(port)
        with socket.socket() as s:
            s.bind(("", 0))
            return host, int(s.getsockname()[1])

    def join(self, address: str, port: int) -> int:
        """Join the group at ``address:port`` and build this rank's backend (DDP broadcasts rank 0's weights).

        Returns:
            This process's id.

        Raises:
            t1_trainer.distributed.CollectiveError: the rendezvous failed or missed the collective deadline.
        """
        from t1_trainer.data_parallel import DataParallelTorchBackend
        from t1_trainer.distributed import RankGroup

        self.group = RankGroup(
            rank=self.rank,
            world_size=self.world_size,
            address=address,
            port=port,
            timeout_s=self.recipe.liveness.collective_timeout_s,
        ).join()
        policy, self.policy = self.policy, None
        self.backend = DataParallelTorchBackend.for_rank(self.group, self.recipe, actor=policy)
        return os.getpid()

    def plan_inputs(self) -> tuple[int, Any]:
        """What the driver needs to plan a step: the policy version and the actor's router geometry.

        Returns:
            ``(policy_version, geometry)``: geometry is a `t1_trainer.shard_plan.RouterGeometry`, or None
            with routing replay off.
        """
        from t1_trainer.shard_plan import router_geometry

        geometry = router_geometry(self.backend.actor) if self.recipe.ppo.routing_replay else None
        return int(self.backend.policy_version), geometry

    def ppo_step(
        self, shard: list[Sample], plan: Any, staleness: int, continuation_lag: int, max_staleness: int
    ) -> tuple[dict[str, Any], float]:
        """`t1_trainer.data_parallel.data_parallel_ppo_shard_step` on this rank's shard of the driver's plan.

        Args:
            shard: the batch's samples at ``plan.shards[rank]``, in that order.
            plan: the step's `t1_trainer.shard_plan.ShardPlan`, planned by the driver.
            staleness: as `TrainerWorker.ppo_step`.
            continuation_lag: as `TrainerWorker.ppo_step`.
            max_staleness: as `TrainerWorker.ppo_step`.

        Returns:
            The metrics of the whole batch (plain, the same on every rank) and this rank's seconds.

        Raises:
            t1_trainer.distributed.CollectiveError: a peer rank died or a collective missed the deadline.
        """
        from t1.run.steps import plain_metrics
        from t1_trainer.data_parallel import data_parallel_ppo_shard_step

        t0 = time.monotonic()
        metrics = data_parallel_ppo_shard_step(
            self.backend,
            shard,
            plan,
            self.recipe.ppo,
            staleness=staleness,
            continuation_lag=continuation_lag,
            max_staleness=max_staleness,
        )
        return plain_metrics(metrics), time.monotonic() - t0

    def critic_warmup_step(self, shard: list[Sample], plan: Any) -> tuple[dict[str, Any], float]:
        """`t1_trainer.data_parallel.data_parallel_critic_warmup_shard_step`; metrics (plain) and seconds."""
        from t1.run.steps import plain_metrics
        from t1_trainer.data_parallel import data_parallel_critic_warmup_shard_step

        t0 = time.monotonic()
        metrics = data_parallel_critic_warmup_shard_step(self.backend, shard, plan, self.recipe.ppo)
        return plain_metrics(metrics), time.monotonic() - t0

    def set_policy_version(self, version: int) -> int:
        """Take the version rank 0 just published (the staleness checks of the next step read it)."""
        self.backend.policy_version = int(version)
        return self.backend.policy_version


class Refused:
    """A step the driver refused before calling any rank (a `t1.run.runtime.PendingTrain`).

    Args:
        error: the refusal (`t1_trainer.shard_plan`'s checks of the whole batch); `result` raises it.
    """

    def __init__(self, error: Exception) -> None:
        self.error = error

    def result(self) -> tuple[dict[str, Any], float]:
        """Raises the refusal, as a step every rank refused alike would have.

        Raises:
            Exception: the refusal (e.g. `t1_trainer.errors.StalenessError`).
        """
        raise self.error


class GroupTrain:
    """A step running on every rank (a `t1.run.runtime.PendingTrain`); `result` waits for all of them.

    Args:
        refs: each rank's call, in rank order.
        pids: each rank's process id (named in a failure).
        what: the step, for messages (``PPO step``, ``critic warm-up step``).
        grace_s: after the first failure, how long the other ranks get to answer (seconds).
        on_result: called with the step's wall seconds once it succeeded.
    """

    def __init__(
        self,
        refs: list[Any],
        pids: list[int],
        what: str,
        grace_s: float,
        on_result: Callable[[float], None] | None = None,
    ) -> None:
        self.refs, self.pids, self.what, self.grace_s = refs, pids, what, grace_s
        self._on_result = on_result

    def result(self) -> tuple[dict[str, Any], float]:
        """Rank 0's metrics (every rank's are the same) and the slowest rank's wall time (seconds).

        Raises:
            TrainerRankLost, Exception: as `answers`.
        """
        rows = self.answers()
        train_s = max(s for _, s in rows)
        if self._on_result is not None:
            self._on_result(train_s)
        return rows[0][0], train_s

    def answers(self) -> list[Any]:
        """Every rank's answer, in rank order, once all answered.

        Raises:
            TrainerRankLost: a rank died, or failed a collective (naming each rank's answer, the dead first).
            Exception: the error every rank raised alike before any collective (e.g. a staleness error),
                as rank 0 raised it.
        """
        import ray
        from ray.exceptions import RayActorError, RayTaskError

        from t1_trainer.distributed import CollectiveError

        answers: dict[int, Any] = {}
        failures: dict[int, BaseException] = {}
        index = {ref: k for k, ref in enumerate(self.refs)}
        pending = list(self.refs)
        while pending and not failures:
            done, pending = ray.wait(pending, num_returns=1)
            self._take(done, index, answers, failures)
        if pending:  # a rank failed: the others' collectives fail soon after (a closed socket, the deadline)
            done, pending = ray.wait(pending, num_returns=len(pending), timeout=self.grace_s)
            self._take(done, index, answers, failures)
        if not failures:
            return [answers[k] for k in range(len(self.refs))]
        died = [k for k, e in failures.items() if isinstance(e, RayActorError)]
        collective = [
            k for k, e in failures.items() if isinstance(e, RayTaskError) and _caused_by(e, CollectiveError)
        ]
        if not died and not collective and 0 in failures:
            raise failures[0]  # a deterministic refusal, the same on every rank
        order = sorted(failures, key=lambda k: (k not in died, k))
        lines = [
            f"rank {k} (pid {self.pids[k]}) {'died' if k in died else 'failed'}: {_cause(failures[k])}"
            for k in order
        ]
        lines += [
            f"rank {k} (pid {self.pids[k]}) did not answer within {self.grace_s:g} s of the failure"
            for k in sorted(index[r] for r in pending)
        ]
        raise TrainerRankLost(
            f"{self.what} of the trainer group ({len(self.refs)} ranks) is lost: "
            + "; ".join(lines)
            + ". Resume from the last checkpoint: t1 train --resume RUN_DIR"
        )

    @staticmethod
    def _take(done: list[Any], index: dict[Any, int], answers: dict, failures: dict) -> None:
        import ray

        for ref in done:
            try:
                answers[index[ref]] = ray.get(ref)
            except Exception as e:  # noqa: BLE001 - every rank's failure is reported with its cause
                failures[index[ref]] = e


def _caused_by(error: BaseException, kind: type) -> bool:
    """Whether a Ray task error wraps an exception of ``kind`` (Ray keeps the remote one as ``cause``)."""
    return isinstance(getattr(error, "cause", None), kind) or isinstance(error, kind)


def _cause(error: BaseException) -> str:
    """One line of a rank's failure: the remote exception's type and message, else Ray's own."""
    inner = getattr(error, "cause", None)
    shown = inner if isinstance(inner, BaseException) else error
    text = " ".join(str(shown).split())
    return f"{type(shown).__name__}: {text[:600]}"


class TrainerGroup:
    """The trainer's ranks as the driver sees them: steps on every rank; publication, checkpoints on rank 0.

    Args:
        recipe: the recipe.
        ranks: the rank actors' handles, in rank order (one `TrainerWorker` when N = 1).
    """

    def __init__(self, recipe: Recipe, ranks: list[Any]) -> None:
        self.recipe = recipe
        self.ranks = ranks
        self.pids: list[int] = []
        self.version = 0  # the ranks' policy version, for the driver's staleness check (N > 1)
        self.geometry: Any = None  # rank 0's router geometry, for the driver's routing check (N > 1)

    @property
    def size(self) -> int:
        """Ranks in the group (``runtime.ray.trainer_workers``)."""
        return len(self.ranks)

    @property
    def lead(self) -> Any:
        """Rank 0's handle: it publishes, checkpoints and saves the final weights."""
        return self.ranks[0]

    @classmethod
    def place(
        cls,
        recipe: Recipe,
        bundles: Sequence[int],
        options: Callable[[int], dict[str, Any]],
        actor_weights: str | None,
    ) -> TrainerGroup:
        """Start one actor per trainer bundle (``options(bundle)``: its Ray options); returns at once."""
        import ray

        if len(bundles) == 1:
            worker = ray.remote(TrainerWorker).options(**options(bundles[0]))
            return cls(recipe, [worker.remote(recipe, actor_weights)])
        rank_cls, n = ray.remote(TrainerRank), len(bundles)
        ranks = [
            rank_cls.options(**options(b)).remote(recipe, k, n, actor_weights) for k, b in enumerate(bundles)
        ]
        return cls(recipe, ranks)

    def pid_calls(self) -> list[Any]:
        """Each rank's ``pid`` call (answered once the actor has built its policy)."""
        return [r.pid.remote() for r in self.ranks]

    def form(self, pids: list[int]) -> None:
        """Record the ranks' pids; with N > 1, rendezvous and join the group (the collective deadline).

        Raises:
            TrainerRankLost: a rank died or failed to join (its cause named).
        """
        import ray

        self.pids = [int(p) for p in pids]
        if self.size == 1:
            return
        spec = self.recipe.runtime.ray
        address, port = ray.get(
            self.lead.rendezvous.remote(spec.trainer_address, spec.trainer_port), timeout=CONTROL_DEADLINE_S
        )
        joins = [r.join.remote(address, port) for r in self.ranks]
        GroupTrain(joins, self.pids, f"the rendezvous at {address}:{port}", self._grace()).answers()
        self.version, self.geometry = ray.get(self.lead.plan_inputs.remote(), timeout=CONTROL_DEADLINE_S)

    def _grace(self) -> float:
        return float(self.recipe.liveness.probe_deadline_s)

    def ppo_step(
        self,
        samples: Sequence[Sample],
        *,
        staleness: int,
        continuation_lag: int,
        max_staleness: int,
        on_result: Callable[[float], None] | None = None,
    ) -> Any:
        """Submit a PPO step; a `t1.run.runtime.PendingTrain`.

        With N > 1 the driver plans the step (`t1_trainer.shard_plan.plan_ppo_step`: streams, staleness,
        routing records, the token-balanced shards) and sends each rank only its shard and the plan; a
        refusal calls no rank (`Refused` raises it at ``result``).
        """
        if self.size == 1:
            batch = list(samples)
            refs = [self.lead.ppo_step.remote(batch, staleness, continuation_lag, max_staleness)]
            return GroupTrain(refs, self.pids, "the PPO step", self._grace(), on_result)
        import functools

        from t1_trainer.shard_plan import geometry_routing_errors, plan_ppo_step

        try:
            plan = plan_ppo_step(
                samples,
                self.recipe.ppo,
                self.size,
                policy_version=self.version,
                routing_errors=functools.partial(geometry_routing_errors, geometry=self.geometry),
                staleness=staleness,
                continuation_lag=continuation_lag,
                max_staleness=max_staleness,
            )
        except Exception as e:  # noqa: BLE001 - the refusal is the step's result, raised where it is read
            return Refused(e)
        refs = [
            r.ppo_step.remote(self.shard(samples, plan, k), plan, staleness, continuation_lag, max_staleness)
            for k, r in enumerate(self.ranks)
        ]
        return GroupTrain(refs, self.pids, "the PPO step", self._grace(), on_result)

    def critic_warmup_step(self, samples: Sequence[Sample]) -> Any:
        """Submit a critic warm-up step (with N > 1, each rank its shard); a `t1.run.runtime.PendingTrain`."""
        what = "the critic warm-up step"
        if self.size == 1:
            return GroupTrain(
                [self.lead.critic_warmup_step.remote(list(samples))], self.pids, what, self._grace()
            )
        from t1_trainer.shard_plan import plan_critic_warmup_step

        try:
            plan = plan_critic_warmup_step(samples, self.size)
        except Exception as e:  # noqa: BLE001 - as in ppo_step
            return Refused(e)
        refs = [
            r.critic_warmup_step.remote(self.shard(samples, plan, k), plan) for k, r in enumerate(self.ranks)
        ]
        return GroupTrain(refs, self.pids, what, self._grace())

    @staticmethod
    def shard(samples: Sequence[Sample], plan: Any, rank: int) -> list[Sample]:
        """The samples ``rank`` receives: the batch's at ``plan.shards[rank]``, in that order."""
        return [samples[i] for i in plan.shards[rank]]

    def published(self, version: int) -> None:
        """After rank 0 published ``version``: the other ranks take it (bounded by the control deadline)."""
        import ray

        self.version = int(version)
        if self.size > 1:
            calls = [r.set_policy_version.remote(version) for r in self.ranks[1:]]
            ray.get(calls, timeout=CONTROL_DEADLINE_S)

    def restore(self, state: RunState) -> None:
        """Every rank loads the checkpoint's trainer part (`TrainerWorker.restore_checkpoint`)."""
        import ray

        self.version = int(ray.get([r.restore_checkpoint.remote(state) for r in self.ranks])[0])

    def kill(self) -> None:
        """Kill every rank's actor (already dead ones are skipped)."""
        import ray

        for actor in self.ranks:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # already dead: nothing to kill
                pass
        self.ranks = []


__all__ = ["GroupTrain", "TrainerGroup", "TrainerRank", "TrainerRankLost"]
