"""The Ray runtime (``runtime.kind: ray``): engine replicas, the trainer and sandbox hosts (T1 §7).

The step loop is the driver's (`t1.run.driver`); this runtime places the actors (`t1.run.ray.placement`,
`t1.run.ray.actors`), runs each trial on a sandbox host against an engine replica (`t1.run.ray.rollout`,
with re-queueing on a lost participant and the parking handshake of partial-rollout continuation), trains
on the trainer (one worker, or with ``runtime.ray.trainer_workers`` > 1 a group of data-parallel ranks,
`t1.run.ray.trainer_group`; remote calls the driver waits on at the barrier, so with ``runtime.mode: async``
the rollout of the next step overlaps the training), and publishes rank 0's weights to every live replica at
the barrier: exported once, put once into Ray's object store, loaded by each replica with generation quiesced,
so no request spans two versions. Evaluation during training runs in the driver's process, its sandboxes
here and its generation on a live replica holding the weights just published.

A local cluster is started by the run and stopped on every exit path (finished, failed, Ctrl-C, SIGTERM);
with ``runtime.ray.address`` the run joins that cluster and kills only its own actors.

Liveness (T1 §7.3, `t1.run.ray.liveness`): engine replicas and sandbox hosts are probed on the recipe's
``liveness`` schedule; a lost one is killed when the driver acts on the loss, and the run goes on with the
rest. The trainer's ranks are not probed (the loss of one fails the step and the run,
`t1.run.ray.trainer_group.TrainerRankLost`). Local sandboxes of a lost host die with its
process; Docker and Daytona sandboxes of a lost host carry the run's label but are not reclaimed here (their
backends' ``reclaim_run`` removes them).

Checkpoints are taken at the barrier in `t1.run.resume`'s format: the trainer (rank 0) writes its part
(weights, optimizer states, counters, RNG), the driver the rest and the rollout buffer (the asynchronous
loop's batch in flight). Not kept across a resume: the replicas' request counters, the routing history,
and lost participants (the resumed run places all of them anew).

Not built: replacing a lost actor with a new one, NCCL publication, and launching SGLang servers in the
replicas' bundles (refused in `preflight`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from t1.run.phases import PhaseClock
from t1.run.ray.liveness import LivenessMonitor, ask_live, wait_publication
from t1.run.ray.placement import Placement, RayCluster, placement_for, ray_problems, reap, reserve
from t1.run.ray.rollout import ParticipantsLost, RayTrials
from t1.run.ray.trainer_group import GroupTrain, TrainerGroup
from t1.run.runtime import EvaluationParts, Publication, RunContext, RunInputs
from t1.run.steps import InFlight
from t1_spec import Recipe
from t1_tasks import Task

if TYPE_CHECKING:
    from t1.run.resume import RunState
    from t1_rollout.engine import SamplingParams
    from t1_rollout.trial import TrialRecord
    from t1_sandbox.base import Sandbox
    from t1_tasks import StepTasks
    from t1_tito import Sample, TitoSession

ACTOR_START_TIMEOUT_S = 900.0
"""Deadline for every actor to have built its part (model, tokenizer) after placement (seconds); on a
loaded 2-core box four processes importing torch and building a model took about 2-3 minutes."""


class RayRuntime:
    """Engine replicas, the trainer (a worker or N ranks) and sandbox hosts on Ray (`t1.run.runtime.Runtime`).

    Args:
        recipe: the validated recipe.
    """

    kind = "ray"

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe
        self.placement: Placement = placement_for(recipe)
        self.cluster: RayCluster | None = None
        self.replicas: list[Any] = []
        self.hosts: list[Any] = []
        self.trainer: TrainerGroup | None = None
        self.actor_pids: list[int] = []
        self.liveness: LivenessMonitor | None = None
        self.trials: RayTrials | None = None
        self.context: RunContext | None = None
        self.start_wall_s: dict[str, float] = {}
        self._group: Any = None
        self._version = 0
        self._evaluation: tuple[TitoSession, Callable[[], Sandbox]] | None = None
        self.phases = PhaseClock()  # the rows' timeline_s: when rollout, training and publication ran
        self._rollout_label = "rollout"

    @classmethod
    def from_spec(cls, recipe: Recipe) -> RayRuntime:
        """The runtime of ``recipe``."""
        return cls(recipe)

    @classmethod
    def preflight(cls, recipe: Recipe) -> list[str]:
        """What stops ``recipe`` from running on Ray here, one line each (cheap: imports no Ray)."""
        return ray_problems(recipe)

    # ---- start and stop

    def start(self) -> RunInputs:
        """Load the pools, start (or join) Ray, place every actor and wait until each has built its part."""
        from t1.run.build import default_run_id, validated_rows
        from t1.run.pools import load_pools

        r = self.recipe
        pool, warmup_pool, warmup_spec = load_pools(r)
        validated = validated_rows(r, pool, warmup_pool, warmup_spec)
        self.cluster = RayCluster.start(r, self.placement)
        t_actors = time.monotonic()
        self.run_id = default_run_id(r)
        self._place(self.run_id)
        self.start_wall_s = {"ray_start": self.cluster.start_s, "actors": time.monotonic() - t_actors}
        self.trials = RayTrials(r, self.replicas, self.hosts, self.liveness, validated, self.reclaim_lost)
        return RunInputs(pool, warmup_pool, warmup_spec, validated)

    def _place(self, run_id: str) -> None:
        """Reserve the placement group and start every actor in its bundle; wait until all are built."""
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from t1.run.ray.actors import EngineReplica, SandboxHost
        from t1.run.ray.liveness import LivenessMonitor, Participant

        r, roles = self.recipe, self.placement.roles
        self._group = reserve(self.placement)
        weights = r.model.checkpoint if r.model.init == "checkpoint" else None

        def options(index: int) -> dict[str, Any]:
            bundle = self.placement.bundles[index]
            return {
                "num_cpus": bundle.get("CPU", 0.0),
                "num_gpus": bundle.get("GPU", 0.0),
                "scheduling_strategy": PlacementGroupSchedulingStrategy(
                    self._group, placement_group_bundle_index=index
                ),
            }

        replica_cls = ray.remote(EngineReplica)
        self.replicas = [
            replica_cls.options(**options(b)).remote(r, i, weights) for i, b in enumerate(roles["engine"])
        ]
        self.trainer = TrainerGroup.place(r, roles["trainer"], options, weights)
        host_cls = ray.remote(SandboxHost)
        self.hosts = [
            host_cls.options(**options(b)).remote(r, self.replicas, run_id) for b in roles["sandbox"]
        ]
        calls = [a.stats.remote() for a in self.replicas + self.hosts] + self.trainer.pid_calls()
        answers = ray.get(calls, timeout=ACTOR_START_TIMEOUT_S)
        self.actor_pids = [a["pid"] if isinstance(a, dict) else int(a) for a in answers]
        self.trainer.form(self.actor_pids[-self.trainer.size :])  # N > 1: the ranks' process group
        self.liveness = LivenessMonitor(
            r.liveness,
            [Participant("engine", i, h) for i, h in enumerate(self.replicas)]
            + [Participant("sandbox", i, h) for i, h in enumerate(self.hosts)],
        )
        self.liveness.start()

    def attach(self, context: RunContext) -> None:
        """Keep the run directory, console and stop token (trials and lost attempts write there)."""
        self.context = context
        if self.trials is not None:
            self.trials.context = context

    def describe(self) -> str:
        """`` on Ray (<mode>, N engine replicas[, K trainer ranks], M sandbox hosts)``."""
        n, k = len(self.hosts), self.recipe.runtime.ray.trainer_workers
        ranks = f"{k} trainer ranks, " if k > 1 else ""
        return (
            f" on Ray ({self.recipe.runtime.mode}, {len(self.replicas)} engine replicas, {ranks}{n} sandbox "
            f"host{'s' * (n != 1)})"
        )

    def close(self) -> None:
        """Kill this run's actors, remove its placement group, and stop a local cluster (idempotent)."""
        try:
            import ray
        except ImportError:
            return
        if self.liveness is not None:
            self.liveness.close()
        if ray.is_initialized():
            if self.trainer is not None:
                self.trainer.kill()
            for actor in [*self.hosts, *self.replicas]:
                try:
                    ray.kill(actor, no_restart=True)
                except Exception:  # already dead: nothing to kill
                    pass
            if self._group is not None:
                from ray.util.placement_group import remove_placement_group

                try:
                    remove_placement_group(self._group)
                except Exception:  # the cluster is gone already
                    pass
        self.hosts, self.replicas, self.trainer, self._group = [], [], None, None
        if self.cluster is not None:
            self.cluster.stop()
            if self.cluster.local:  # this machine's processes: wait for them, kill what outlives the cluster
                reap([*self.actor_pids, *self.cluster.pids])

    # ---- rollout

    def begin_rollout(self, label: str) -> None:
        """Reclaim the participants lost since the last batch; refuse to go on with none of a role."""
        self.trials.begin()
        self._rollout_label = f"rollout {label}"
        self.phases.begin(self._rollout_label)

    async def run_trial(
        self, task: Task, record: TrialRecord, sampling: SamplingParams, label: str
    ) -> TrialRecord:
        """`t1.run.ray.rollout.RayTrials.run_trial`."""
        return await self.trials.run_trial(task, record, sampling, label)

    def end_rollout(self) -> int:
        """The batch's re-queued attempts; raises `ParticipantsLost` when a role has none left."""
        self.phases.end(self._rollout_label)
        return self.trials.end()

    def reclaim_lost(self, *, check: bool = True) -> None:
        """Kill the participants lost since the last call; with ``check``, refuse to go on with none left.

        Raises:
            ParticipantsLost: ``check`` and no engine replica or no sandbox host is left.
        """
        import ray

        console = self.context.console if self.context is not None else None
        for p in self.liveness.to_reclaim():
            try:
                ray.kill(p.handle, no_restart=True)
            except Exception:  # already gone
                pass
            left = len(self.liveness.live(p.role))
            if console is not None:
                console.print(
                    f"[yellow]lost {p.name}[/]: {self.liveness.cause(p.role, p.index)}; killed, "
                    f"{left} {'replica' if p.role == 'engine' else 'host'}{'s' * (left != 1)} left"
                )
        for role, what in (("engine", "engine replica"), ("sandbox", "sandbox host")):
            if check and not self.liveness.live(role):
                causes = "; ".join(self.liveness.summary()[role].values())
                raise ParticipantsLost(
                    f"every {what} of the run was lost, nothing left to go on with: {causes}"
                )

    # ---- training and publication

    def train_ppo(
        self, samples: Sequence[Sample], *, staleness: int, continuation_lag: int, max_staleness: int
    ) -> GroupTrain:
        """Submit a PPO step to the trainer's ranks; the driver rolls out meanwhile (async mode).

        Its timeline window runs from the submission for the slowest rank's wall seconds (the ranks are idle
        when a step is submitted, so they start then, give or take the transfer of the samples).
        `t1.run.ray.trainer_group.GroupTrain.result` raises `TrainerRankLost` when a rank is lost.
        """
        submitted = self.phases.now()
        return self.trainer.ppo_step(
            samples,
            staleness=staleness,
            continuation_lag=continuation_lag,
            max_staleness=max_staleness,
            on_result=lambda train_s: self.phases.record("train", submitted, submitted + train_s),
        )

    def train_critic(self, samples: Sequence[Sample]) -> GroupTrain:
        """Submit a critic warm-up step to the trainer's ranks."""
        return self.trainer.critic_warmup_step(samples)

    def publish(self) -> Publication:
        """Publish rank 0's weights to every live replica at the barrier (T1 Appendix 12).

        The other trainer ranks then take the new version. A replica lost during publication is probed out and
        the publication retried once, to the replicas still behind the trainer's next version only (those a
        partial publication updated keep it), so every live replica ends on one version.
        """
        import ray
        from ray.exceptions import RayError

        deadline = self.recipe.liveness.probe_deadline_s
        self.phases.begin("publish")
        for attempt in (0, 1):
            self.reclaim_lost()
            targets = self.liveness.live("engine")
            if attempt:  # after a partial publication: only the replicas still behind the next version
                version = ray.get(self.trainer.lead.policy_version.remote(), timeout=deadline) + 1
                held = ask_live(self.liveness, "engine", self.replicas, "weight_version", deadline)
                targets = [i for i in self.liveness.live("engine") if held.get(i, version) < version]
            ref = self.trainer.lead.publish.remote([self.replicas[i] for i in targets])
            try:
                answer = wait_publication(self.liveness, ref, targets, self.replicas)
            except RayError:
                if attempt:
                    raise
                ask_live(self.liveness, "engine", self.replicas, "stats", deadline)
                if not any(self.liveness.is_lost("engine", i) for i in targets):
                    raise  # no replica was lost: the failure is the trainer's own
                continue
            self._version = int(answer["version"])
            self.trainer.published(self._version)
            self.phases.end("publish")
            return Publication(
                version=self._version,
                wall_s={"publish": answer["publish"], "put": answer["put"]},
                objects=int(answer["puts"]),
                bytes=int(answer["bytes"]),
            )
        raise AssertionError("unreachable")

    def row_extras(self, step: int, batch: InFlight, publication: Publication) -> dict[str, Any]:
        """The replicas' view of the step: versions checked, requests served, objects put, losses.

        Raises:
            RuntimeError: a live replica serves another version than the one just published.
        """
        r = self.recipe
        deadline = r.liveness.probe_deadline_s
        versions = ask_live(self.liveness, "engine", self.replicas, "weight_version", deadline)
        if set(versions.values()) - {publication.version}:
            raise RuntimeError(
                f"step {step}: after publication the replicas serve versions {versions}, the trainer "
                f"{publication.version}; publication must leave every replica on one version"
            )
        stats = ask_live(self.liveness, "engine", self.replicas, "stats", deadline)
        return {
            "runtime": {"kind": "ray", "mode": r.runtime.mode},
            "replica_requests": [
                int(stats[i]["requests"]) if i in stats else None for i in range(len(self.replicas))
            ],
            "publish_objects": publication.objects,
            "publish_bytes": publication.bytes,
            "trainer/ranks": self.trainer.size,
            "trials_requeued": batch.requeued,
            "participants_lost": self.liveness.summary(),
            "timeline_s": self.phases.row(),
        }

    def evaluation_parts(self, publication_version: int) -> EvaluationParts:
        """A live replica (the weights just published), sandboxes made here, the recipe's template."""
        from t1.run.build import build_tito, sandbox_factory
        from t1.run.ray.actors import ReplicaEngine

        live = self.liveness.live("engine")
        if not live:
            self.reclaim_lost()  # raises ParticipantsLost, naming the causes
        if self._evaluation is None:  # the tokenizer and the factory, built at the first evaluation
            self._evaluation = (build_tito(self.recipe), sandbox_factory(self.recipe, run_id=self.run_id))
        tito, factory = self._evaluation
        return EvaluationParts(
            engine=ReplicaEngine(self.replicas[live[0]], weight_version=publication_version),
            sandbox_factory=factory,
            tokenizer=tito.tokenizer,
            template=tito.template,
            version=publication_version,
        )

    # ---- checkpoints

    def checkpoint_parts(self, checkpoint: Path) -> dict[str, Any]:
        """Rank 0 writes the trainer's part (`TrainerWorker.save_checkpoint`); the version served."""
        import ray

        optimizer = self.recipe.trainer.checkpoint_optimizer
        part = ray.get(self.trainer.lead.save_checkpoint.remote(str(checkpoint), optimizer))
        return {"trainer": part, "weight_version": self._version}

    def restore(self, state: RunState, stream: StepTasks) -> None:
        """Every trainer rank loads its part, every replica rank 0's restored weights under the saved version.

        Raises:
            RuntimeError: a replica does not serve the restored version after loading it.
        """
        import ray

        from t1.run.resume import restore_stream

        self.trainer.restore(state)
        lead = self.trainer.lead
        ray.get(lead.load_replicas.remote(self.replicas, state.weight_version))  # bulk: no deadline
        deadline = self.recipe.liveness.probe_deadline_s
        versions = ray.get([h.weight_version.remote() for h in self.replicas], timeout=deadline)
        if set(versions) != {state.weight_version}:
            raise RuntimeError(
                f"resume: the replicas serve versions {versions} after loading the restored weights, not "
                f"{state.weight_version}"
            )
        self._version = state.weight_version
        restore_stream(state, stream)

    def save_weights(self, run_dir: Path) -> None:
        """Rank 0 saves the actor and critic weights under ``run_dir``."""
        import ray

        ray.get(self.trainer.lead.save_weights.remote(str(run_dir)))


__all__ = ["ACTOR_START_TIMEOUT_S", "RayRuntime"]
