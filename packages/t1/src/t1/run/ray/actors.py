"""The actors of a Ray run: engine replicas, the trainer worker and sandbox hosts (T1 §7, Appendix 12).

Each class here is plain Python; `t1.run.ray.runtime` turns it into a Ray actor with ``ray.remote`` and places
it in its bundle, so this module imports Ray only inside the calls that need it.

- `EngineReplica` holds one engine built from the recipe exactly as the embedded run builds it
  (`t1.run.build.build_engine`: same seeded weights) and serves ``generate`` concurrently from its event
  loop: an embedded engine, or the client of one SGLang server joined by URL (`replica_recipe`).
- `TrainerWorker` holds the trainer backend (``trainer.backend``) on a copy of the same policy, runs the PPO
  and critic warm-up steps, and publishes its weights: exported once, put once into Ray's object store, and
  loaded by every replica from that one object at the barrier (`t1_trainer.publish.publish_weights` does the
  quiesce, update and resume; `ReplicaReceiver` is its view of one replica). It writes and loads the
  trainer's part of a checkpoint itself (`t1.run.resume.save_trainer_state`, ``restore_trainer``), in the
  run directory the driver names.
- `SandboxHost` runs whole trials (`t1_rollout.trial.run_trial`) on its node, at most
  ``rollout.per_node_cap`` at once, each generating on the replica the driver assigned to it
  (`ReplicaEngine`); a cancelled trial's sandbox is reclaimed on the host and its record returned. With
  partial-rollout continuation it parks a trial on request and keeps its coroutine alive across steps
  (`SandboxHost.park`, ``wait_parked``, ``resume``; the driver's side is `t1.run.ray.rollout`).

Data-parallel trainer ranks (``runtime.ray.trainer_workers`` > 1) are `t1.run.ray.trainer_group.TrainerRank`,
a `TrainerWorker` whose backend trains over a process group. Every actor answers ``stats`` (the liveness probe
of `t1.run.ray.liveness`). Not built: NCCL publication.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from t1_spec import Recipe

if TYPE_CHECKING:
    from t1.run.resume import RunState
    from t1_rollout.engine import SamplingParams
    from t1_rollout.parking import Parking
    from t1_rollout.trial import TrialRecord
    from t1_tasks import Task
    from t1_tito import Sample

CONTROL_DEADLINE_S = 120.0
"""Deadline of one control-plane call to an actor (pause, resume, version, cancel; seconds): the paper's
probe deadline (T1 §7). Weight transfers (bulk) have none."""


def replica_recipe(recipe: Recipe, index: int) -> Recipe:
    """The recipe engine replica ``index`` builds its engine from.

    Embedded: the recipe itself (every replica holds the same seeded policy). SGLang: the ``engine``
    section narrowed to the one server of ``engine.urls[index]``
    (`t1_rollout.engine.sglang.replicas.one_server_spec`), so each actor is the client of its own server.
    """
    if recipe.engine.kind != "sglang":
        return recipe
    from t1_rollout.engine.sglang.replicas import one_server_spec

    return recipe.model_copy(update={"engine": one_server_spec(recipe.engine, index)})


class EngineReplica:
    """One engine replica (an async Ray actor); the engine is built as the embedded run builds it.

    With ``engine.kind: embedded`` the actor holds the engine; with ``sglang`` it holds the client of the
    server at ``engine.urls[index]`` (`replica_recipe`), joined and labelled version 0, and publishes to it
    through that client's own weight update (``engine.weight_sync``), pause and flush included.

    Args:
        recipe: the recipe (``model``, ``engine``, ``seed``).
        index: the replica's index (for its statistics; the SGLang server it joins).
        actor_weights: the actor file of ``model.checkpoint`` with ``model.init: checkpoint``, else None.
    """

    def __init__(self, recipe: Recipe, index: int, actor_weights: str | None = None) -> None:
        from t1.run.build import build_engine

        _, self.engine = build_engine(replica_recipe(recipe, index), actor_weights)
        self.index = index
        self.requests = 0

    async def generate(self, input_ids: list[int], sampling: Any, options: dict[str, Any]) -> Any:
        """`t1_rollout.engine.base.Engine.generate` on this replica (``options``: its keyword arguments).

        Raises:
            asyncio.CancelledError: the caller cancelled it (``ray.cancel``); the engine stops at its next
                token.
        """
        self.requests += 1
        return await self.engine.generate(input_ids, sampling, **options)

    async def pause(self) -> int:
        """Quiesce: wait for the request in flight, hold new ones; returns the weight version served."""
        await asyncio.to_thread(self.engine.pause)
        return self.engine.weight_version

    def resume(self) -> None:
        """Release held requests."""
        self.engine.resume()

    def update_weights(self, state_dict: Mapping[str, Any], weight_version: int) -> int:
        """Load the published weights (paused only); returns the new weight version.

        Raises:
            t1_rollout.engine.EngineStateError: not paused.
            ValueError: a version that does not advance, or names or shapes that do not match.
        """
        self.engine.update_weights(state_dict, weight_version=weight_version)
        return self.engine.weight_version

    def weight_version(self) -> int:
        """The version of the weights this replica serves."""
        return self.engine.weight_version

    def stats(self) -> dict[str, Any]:
        """Requests served, the weight version, the engine's totals and the process id."""
        return {
            "index": self.index,
            "requests": self.requests,
            "weight_version": self.engine.weight_version,
            "pid": os.getpid(),
            **self.engine.stats(),
        }


class ReplicaEngine:
    """The `t1_rollout.engine.base.Engine` protocol over one `EngineReplica` actor handle.

    ``run_trial`` and the harness call it unchanged; a trial keeps one `ReplicaEngine`, so its trajectory
    stays on one replica (its prefix cache holds the trial's earlier turns). ``weight_version`` follows the
    last answer. A cancelled ``generate`` cancels the replica's request (``ray.cancel``).
    """

    def __init__(self, handle: Any, weight_version: int = 0) -> None:
        self.handle = handle
        self.weight_version = weight_version

    async def generate(
        self,
        input_ids: list[int],
        sampling: Any,
        *,
        return_logprob: bool = True,
        return_routed_experts: bool = True,
        routed_experts_start_len: int = 0,
    ) -> Any:
        """Generate on the replica; same arguments and answer as `EmbeddedEngine.generate`."""
        import ray

        options = {
            "return_logprob": return_logprob,
            "return_routed_experts": return_routed_experts,
            "routed_experts_start_len": routed_experts_start_len,
        }
        ref = self.handle.generate.remote(list(input_ids), sampling, options)
        try:
            answer = await ref
        except asyncio.CancelledError:
            ray.cancel(ref)  # the straggler tail is cancelled on the replica too (T1 §7.4)
            raise
        self.weight_version = answer.weight_version
        return answer

    def pause(self) -> None:
        """Quiesce the replica (bounded by `CONTROL_DEADLINE_S`)."""
        import ray

        self.weight_version = ray.get(self.handle.pause.remote(), timeout=CONTROL_DEADLINE_S)

    def resume(self) -> None:
        """Resume the replica (bounded by `CONTROL_DEADLINE_S`)."""
        import ray

        ray.get(self.handle.resume.remote(), timeout=CONTROL_DEADLINE_S)

    def update_weights(self, state_dict: Mapping[str, Any], *, weight_version: int) -> None:
        """Load ``state_dict`` on the replica (a bulk transfer: no deadline)."""
        import ray

        self.weight_version = ray.get(self.handle.update_weights.remote(state_dict, weight_version))


class _ObjectStoreChannel:
    """Puts a state dict into Ray's object store once, however many replicas load it."""

    def __init__(self) -> None:
        self._held: tuple[int, Any] | None = None
        self.puts = 0
        self.put_s = 0.0
        self.bytes = 0  # tensor bytes put (the weights' size, once per publication)

    def ref(self, state_dict: Mapping[str, Any]) -> Any:
        import ray

        if self._held is None or self._held[0] != id(state_dict):
            t0 = time.monotonic()
            self._held = (id(state_dict), ray.put(dict(state_dict)))
            self.put_s += time.monotonic() - t0
            self.puts += 1
            self.bytes += sum(int(t.numel()) * int(t.element_size()) for t in state_dict.values())
        return self._held[1]


class ReplicaReceiver:
    """`t1_trainer.publish.WeightReceiver` over one replica: the weights travel as one object-store ref.

    Every receiver of one publication shares a channel, so the state dict that `publish_weights` exported
    once is put once, and each replica's ``update_weights`` receives the same object (Ray resolves the ref
    in the replica's process).
    """

    def __init__(self, handle: Any, channel: _ObjectStoreChannel) -> None:
        import ray

        self.handle = handle
        self.channel = channel
        self.weight_version: int = ray.get(handle.weight_version.remote(), timeout=CONTROL_DEADLINE_S)

    def pause(self) -> None:
        """Quiesce the replica (bounded by `CONTROL_DEADLINE_S`)."""
        import ray

        self.weight_version = ray.get(self.handle.pause.remote(), timeout=CONTROL_DEADLINE_S)

    def resume(self) -> None:
        """Resume the replica (bounded by `CONTROL_DEADLINE_S`)."""
        import ray

        ray.get(self.handle.resume.remote(), timeout=CONTROL_DEADLINE_S)

    def update_weights(self, state_dict: Mapping[str, Any], *, weight_version: int) -> None:
        """Send the one object-store copy of ``state_dict`` (a bulk transfer: no deadline)."""
        import ray

        ref = self.channel.ref(state_dict)
        self.weight_version = ray.get(self.handle.update_weights.remote(ref, weight_version))


def trainer_policy(recipe: Recipe, actor_weights: str | None = None) -> Any:
    """The policy a trainer process trains: built as the embedded run builds it, then deep-copied.

    With the embedded engine it is `t1.run.build.build_engine`'s model (so the replicas' version 0 is exactly
    the trainer's); with a server engine `t1.run.build.build_policy` (building the engine here would join
    the replicas' servers a second time).
    """
    from t1.run.build import build_engine, build_policy

    if recipe.engine.kind == "embedded":
        model, engine = build_engine(recipe, actor_weights)
        engine.close()  # only the model is wanted; the engine's one-thread setting stays, as embedded
    else:
        model = build_policy(recipe, actor_weights)
    return copy.deepcopy(model)


class TrainerWorker:
    """The trainer backend (``trainer.backend``) in its own actor, on the policy the replicas start from.

    The actor model is built as the embedded run builds it (`t1.run.build.build_engine`, then a deep copy
    for the backend), so the replicas' version 0 is exactly the trainer's.

    Args:
        recipe: the recipe.
        actor_weights: the actor file of ``model.checkpoint`` with ``model.init: checkpoint``, else None.
    """

    def __init__(self, recipe: Recipe, actor_weights: str | None = None) -> None:
        from t1_trainer.base import TRAINER_BACKENDS

        self.recipe = recipe
        self.backend = TRAINER_BACKENDS.load(recipe.trainer.backend).from_spec(
            recipe, actor=trainer_policy(recipe, actor_weights)
        )

    def ppo_step(
        self, samples: list[Sample], staleness: int, continuation_lag: int, max_staleness: int
    ) -> tuple[dict[str, Any], float]:
        """`t1_trainer.step.ppo_step` with these checks; returns its metrics (plain) and its wall time (s).

        Raises:
            t1_trainer.errors.StalenessError: a sample is not ``staleness`` versions behind (up to
                ``continuation_lag`` more for a continued trial), or is older than ``max_staleness``.
        """
        from t1.run.steps import plain_metrics
        from t1_trainer.step import ppo_step

        t0 = time.monotonic()
        metrics = ppo_step(
            self.backend,
            samples,
            self.recipe.ppo,
            staleness=staleness,
            continuation_lag=continuation_lag,
            max_staleness=max_staleness,
        )
        return plain_metrics(metrics), time.monotonic() - t0

    def critic_warmup_step(self, samples: list[Sample]) -> tuple[dict[str, Any], float]:
        """`t1_trainer.step.critic_warmup_step`; returns its metrics (plain) and its wall time (s)."""
        from t1.run.steps import plain_metrics
        from t1_trainer.step import critic_warmup_step

        t0 = time.monotonic()
        metrics = critic_warmup_step(self.backend, samples, self.recipe.ppo)
        return plain_metrics(metrics), time.monotonic() - t0

    def publish(self, replicas: list[Any]) -> dict[str, float]:
        """Publish the actor's weights to every replica at the barrier (T1 Appendix 12).

        `t1_trainer.publish.publish_weights` pauses every replica, exports the weights once, and each
        replica loads the one object-store copy under the next version; all resume, even on failure.

        Returns:
            ``publish`` (wall time pause to resume, seconds), ``put`` (seconds spent in ``ray.put``),
            ``puts`` (objects put: 1 per publication), ``bytes`` (tensor bytes put, the actor's weights) and
            ``version`` (the new weight version).
        """
        from t1_trainer.publish import publish_weights

        channel = _ObjectStoreChannel()
        receivers = [ReplicaReceiver(h, channel) for h in replicas]
        wall = publish_weights(self.backend, receivers)
        return {
            "publish": wall,
            "put": channel.put_s,
            "puts": channel.puts,
            "bytes": channel.bytes,
            "version": int(getattr(self.backend, "policy_version", 0)),
        }

    def policy_version(self) -> int:
        """The version of the actor weights last published (`TrainerBackend.policy_version`)."""
        return int(getattr(self.backend, "policy_version", 0))

    def save_checkpoint(self, checkpoint: str, optimizer: bool) -> dict[str, Any]:
        """Write the trainer's part of a checkpoint into ``checkpoint`` (`t1.run.resume.save_trainer_state`).

        ``checkpoint`` is the driver's path (``<run>/checkpoints/step-NNNN``): the same folder on a local
        cluster; on a multi-node one the run directory must be shared storage at the same path on every
        node, which the driver checks when it writes the rest (`t1.run.resume.save_state`).

        Returns:
            The files written with their sizes, the backend's counters and this process's RNG states.
        """
        from t1.run.resume import save_trainer_state

        return save_trainer_state(Path(checkpoint), self.backend, optimizer=optimizer)

    def restore_checkpoint(self, state: RunState) -> int:
        """Load the trainer's part of a checkpoint (`t1.run.resume.restore_trainer`, RNG states last).

        Args:
            state: the `t1.run.resume.RunState` the driver read (its rollout buffer left out).

        Returns:
            The restored ``policy_version``.

        Raises:
            t1.run.resume.ResumeError: a file does not load, or the backend is not one a resume rebuilds.
        """
        from t1.run.resume import restore_trainer

        restore_trainer(state, self.backend)
        return self.policy_version()

    def load_replicas(self, replicas: list[Any], weight_version: int) -> float:
        """Give the restored actor weights to every replica under the checkpoint's ``weight_version``.

        `t1.run.resume.load_engines` over `ReplicaReceiver`s: every replica paused, the weights put into
        the object store once, loaded by each, all resumed; the version is the checkpoint's (no advance).
        Called before any generation of a resumed run.

        Returns:
            Wall time, seconds.
        """
        from t1.run.resume import load_engines

        channel = _ObjectStoreChannel()
        return load_engines(self.backend, [ReplicaReceiver(h, channel) for h in replicas], weight_version)

    def save_weights(self, run_dir: str) -> None:
        """Save the actor and critic weights under ``run_dir`` (`t1_trainer.weights.save_weights`)."""
        from t1_trainer.weights import save_weights

        save_weights(self.backend, run_dir)

    def pid(self) -> int:
        """The actor's process id (for leak checks)."""
        return os.getpid()


@dataclasses.dataclass(frozen=True)
class TrialOrder:
    """What the driver sends a sandbox host for one trial.

    Attributes:
        task: the task (`t1_tasks.Task`).
        record: the trial's record as the scheduler made it (id, launch index).
        sampling: the trial's sampling parameters (its own seed).
        replica: index of the engine replica the trial generates on.
        out_dir: where the verifier's files go (the run directory's verifier folder; a shared path on a
            multi-node cluster).
        validated: the task's row of the pool's validation record, or None.
        parks: whether the trial honours parking requests (partial-rollout continuation, `SandboxHost.park`).
    """

    task: Task
    record: TrialRecord
    sampling: SamplingParams
    replica: int
    out_dir: str
    validated: Any = None
    parks: bool = False


class SandboxHost:
    """Runs whole trials on its node, at most ``rollout.per_node_cap`` at once (an async Ray actor).

    Args:
        recipe: the recipe (``sandbox``, ``rollout``, ``model.tokenizer``, ``tito``, ``reward``).
        replicas: the engine replica handles, indexed as `TrialOrder.replica`.
        run_id: the run's id, labelling its sandboxes (`t1.run.build.sandbox_factory`).
    """

    def __init__(self, recipe: Recipe, replicas: list[Any], run_id: str) -> None:
        from t1.run.build import build_tito, sandbox_factory
        from t1_rollout.harness import HarnessConfig
        from t1_rollout.trial import TrialLimits

        self.recipe = recipe
        self.replicas = replicas
        self.tito = build_tito(recipe)
        self.sandbox_factory = sandbox_factory(recipe, run_id=run_id)
        self.harness = HarnessConfig.from_spec(recipe.rollout)
        self.limits = TrialLimits.from_spec(recipe.rollout)
        self.cap = recipe.rollout.per_node_cap
        self._gate: asyncio.Semaphore | None = None
        self._running: dict[str, asyncio.Task] = {}
        self._parking: dict[str, Parking] = {}  # trial id -> its Parking (continuation on)
        self._records: dict[str, TrialRecord] = {}  # trial id -> its record, for a parked trial's snapshot
        self.peak = 0

    async def run_trial(self, order: TrialOrder) -> TrialRecord:
        """Run one trial to its end, or to its cancellation by `cancel`; returns its `TrialRecord`.

        A trial cancelled while it waits for a slot never creates a sandbox; one cancelled while it runs
        (parked included) has its sandbox reclaimed by ``run_trial`` first. Either way the record comes back
        ``cancelled``. With ``order.parks`` the trial honours `park` at its turn boundaries; a parked trial's
        call stays pending, its coroutine alive, until `resume` or `cancel`.
        """
        from t1_rollout.parking import Parking
        from t1_rollout.trial import run_trial

        if self._gate is None:
            self._gate = asyncio.Semaphore(self.cap)
        record = order.record
        engine = ReplicaEngine(self.replicas[order.replica])
        if order.parks:
            record.parking = Parking()
            self._parking[record.trial_id] = record.parking
        self._records[record.trial_id] = record

        async def one() -> Any:
            async with self._gate:
                self.peak = max(self.peak, self.cap - self._gate._value)
                return await run_trial(
                    order.task,
                    sandbox_factory=self.sandbox_factory,
                    engine=engine,
                    tito=self.tito,
                    sampling=order.sampling,
                    harness=self.harness,
                    limits=self.limits,
                    reward_spec=self.recipe.reward,
                    out_dir=Path(order.out_dir),
                    record=record,
                    validated=order.validated,
                )

        task = asyncio.ensure_future(one())
        self._running[record.trial_id] = task
        try:
            await task
        except asyncio.CancelledError:
            record.status = "cancelled"
            record.cause = record.cause or "scheduler: cancelled before it started"
        finally:
            if self._running.get(record.trial_id) is task:  # a re-queued attempt may reuse the id
                del self._running[record.trial_id]
                self._parking.pop(record.trial_id, None)
                self._records.pop(record.trial_id, None)
        return dataclasses.replace(record, parking=None)  # the handle stays here

    def cancel(self, trial_id: str) -> bool:
        """Cancel one running trial (the oversampling tail, T1 §7.4); False when it is not running here."""
        task = self._running.get(trial_id)
        if task is None:
            return False
        task.cancel()
        return True

    def park(self, trial_id: str) -> bool:
        """Ask a running trial to park at its next turn boundary (T1 §10); False when it cannot here."""
        parking = self._parking.get(trial_id)
        if parking is None or trial_id not in self._running:
            return False
        parking.ask()
        return True

    async def wait_parked(self, trial_id: str) -> TrialRecord | None:
        """Wait until the trial waits at a turn boundary; its record as it stands, or None once it ended."""
        parking, task = self._parking.get(trial_id), self._running.get(trial_id)
        if parking is None or task is None:
            return None
        parked = asyncio.ensure_future(parking.wait_parked())
        try:
            await asyncio.wait({parked, task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            parked.cancel()
        if not parking.parked or task.done():
            return None
        return dataclasses.replace(self._records[trial_id], parking=None)

    def resume(self, trial_id: str) -> bool:
        """Let a parked trial go on, under the weights the replicas serve now; False when not held here."""
        parking = self._parking.get(trial_id)
        if parking is None:
            return False
        parking.resume()
        return True

    def stats(self) -> dict[str, int]:
        """Trials in flight, the peak concurrency reached, the cap and the process id."""
        return {"running": len(self._running), "peak": self.peak, "cap": self.cap, "pid": os.getpid()}


__all__ = [
    "CONTROL_DEADLINE_S",
    "EngineReplica",
    "ReplicaEngine",
    "ReplicaReceiver",
    "SandboxHost",
    "TrainerWorker",
    "TrialOrder",
    "replica_recipe",
    "trainer_policy",
]
