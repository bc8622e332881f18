"""The training loop on Ray: engine replicas, a trainer worker and sandbox hosts; sync or one-step async.

``runtime.mode: sync`` runs each step as the embedded loop does (rollout, then training, then publication:
staleness 0). ``runtime.mode: async`` is the one-step asynchronous loop of T1 Appendix 12: the rollout of
step t+1 runs on weight version t while step t trains. Its barrier waits for both the rollout batch
(admitted, tail cancelled) and the training step, then publishes version t+1 to every replica with
generation quiesced, so no request spans two versions; step t+1 then trains that batch, drawn by version t,
at staleness exactly 1 (the first step trains at 0), which `t1_trainer.step.ppo_step` checks. With
``runtime.max_staleness: k`` rollout runs k versions ahead instead (a queue, `t1.run.staleness`).

The driver (this process) draws the tasks and admits trials with the scheduler the embedded loop uses
(`t1_rollout.scheduler.collect_batch`); each trial runs on a `SandboxHost`, generating on the replica the
driver assigned it (the least loaded one when the trial starts; a trajectory stays on one replica). The
driver writes every trajectory into the same run directory layout as the embedded loop (`t1.run.run_dir`).

A local cluster is started by the run and stopped on every exit path (finished, failed, Ctrl-C, SIGTERM);
with ``runtime.ray.address`` the run joins that cluster and kills only its own actors.

Liveness (T1 §7.3, `t1.run.ray.liveness`): engine replicas and sandbox hosts are probed on the recipe's
``liveness`` schedule. A trial whose replica or host is lost (probe failed or unanswered, or a call to it
failed because its actor died) is kept as an infrastructure failure under its own file
(``<trial id>-lost<n>.json``, never scored) and re-queued on the live participants, at most `MAX_REQUEUES`
times, its verifier files apart (``verifier/requeued-<n>/``); the lost actor is killed when the driver acts on
the loss, at the latest at the next barrier, and the run goes on with the rest. A run left with no engine
replica or no sandbox host fails after that rollout, naming the causes (`ParticipantsLost`). The trainer
worker is not probed (its loss fails the run). Local sandboxes of a lost host die with its process; Docker
and Daytona sandboxes of a lost host carry the run's label but are not reclaimed by the loop (their
backends' ``reclaim_run`` removes them; not called here). Re-queued attempts do not take sandbox creation
tokens again (`t1_rollout.scheduler` paces first attempts only).

Checkpoints (every ``trainer.checkpoint_every`` PPO steps, at the barrier, in the embedded loop's format) and
``t1 train --resume``: `t1.run.ray.checkpoint`; the asynchronous loop saves the batch in flight, and a resumed
run trains it at staleness 1.

Not built: partial-rollout continuation, replacing a lost actor with a new one, data-parallel trainer
workers, NCCL publication, evaluation during training.
"""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from t1.run import console as out
from t1.run.loop import RunSummary, _reopen, admitted_samples, planned_steps, trial_seed, warmup_steps
from t1.run.preflight import preflight, refuse_unless_ok
from t1.run.ray.checkpoint import InFlight, RayCheckpoints
from t1.run.ray.liveness import ask_live, lost_attempt, observe, trial_or_loss, wait_publication
from t1.run.ray.placement import Placement, RayCluster, placement_for, ray_problems, reap, reserve
from t1.run.run_dir import RunDir
from t1.run.signals import SIGNAL_NAMES, StopToken, deferred_signals, run_interruptible
from t1.run.staleness import advance, fill_pipeline, lookahead, staleness_histogram, staleness_problems
from t1_spec import Recipe

ACTOR_START_TIMEOUT_S = 900.0
"""Deadline for every actor to have built its part (model, tokenizer) after placement (seconds); on a
loaded 2-core box four processes importing torch and building a model took about 2-3 minutes."""

CANCEL_DEADLINE_S = 120.0
"""How long the driver waits for a cancelled trial's record after asking its host to cancel it (seconds):
the host reclaims the sandbox first (T1 §7 probe deadline)."""

MAX_REQUEUES = 3
"""Times one trial is re-queued after losing its replica or host before it is recorded as failed
(infrastructure, not scored): a bound, so that a run losing participants one after another still ends."""


class ParticipantsLost(RuntimeError):
    """Every engine replica, or every sandbox host, of the run was lost: nothing is left to go on with."""


class RayRun(RayCheckpoints):
    """One training run of a recipe on Ray (``runtime.kind: ray``); same outputs as `t1.run.loop.Run`.

    Args:
        recipe: the validated recipe.
        resolved: the resolved recipe as plain data (written into the run directory).
        console: where progress and the per-step table go.
        stop: the stop token the signal handlers set (`t1.run.signals.stop_signals`).
        resume_from: a checkpoint folder of an earlier run of this recipe (``<run>/checkpoints/step-NNNN``,
            `t1.run.resume.open_run`): the run continues in that run directory from that checkpoint's state
            (`t1.run.ray.checkpoint`).

    Raises:
        PreflightError: the recipe cannot run here (the shared preflight, with this runtime's own lines).
    """

    def __init__(
        self,
        recipe: Recipe,
        resolved: dict[str, Any],
        console: Console | None = None,
        stop: StopToken | None = None,
        resume_from: Path | None = None,
    ) -> None:
        self.recipe = recipe
        self.resume_from = resume_from
        self.resolved = resolved
        self.console = console or out.run_console()
        self.stop = stop or StopToken()
        self.verdict = preflight(recipe)
        out.print_notes(self.console, recipe, self.verdict)
        refuse_unless_ok(self.verdict)
        self.progress = out.RunProgress(self.console)
        self.rundir: RunDir | None = None
        self.cluster: RayCluster | None = None
        self.placement: Placement = placement_for(recipe)
        self.replicas: list[Any] = []
        self.hosts: list[Any] = []
        self.trainer: Any = None
        self.actor_pids: list[int] = []
        self.in_flight: InFlight | None = None
        self.liveness: Any = None
        self._requeued = 0
        self._fatal: ParticipantsLost | None = None
        self._group: Any = None
        self._served = [0] * recipe.runtime.ray.engine_replicas

    @classmethod
    def from_spec(cls, recipe: Recipe, resolved: dict[str, Any], **context: Any) -> RayRun:
        """The run of ``recipe`` (``context``: ``console``, ``stop``, ``resume_from``)."""
        return cls(recipe, resolved, **context)

    @classmethod
    def preflight(cls, recipe: Recipe) -> list[str]:
        """What stops ``recipe`` from running on Ray here, one line each (cheap: imports no Ray)."""
        return ray_problems(recipe) + staleness_problems(recipe)

    @property
    def run_dir(self) -> Path | None:
        """The run directory, once start-up has created it (None before)."""
        return self.rundir.root if self.rundir is not None else None

    # ---- the run

    def run(self) -> RunSummary:
        """Start (or join) Ray, place the actors, run warm-up and the PPO steps, save the weights, tear down.

        ``status.json`` says how the run ended, as in the embedded loop. Ray is torn down on every path: the
        run's actors are killed, its placement group removed, and a local cluster's processes stopped.

        Returns:
            The `RunSummary`; ``wall_s`` adds ``ray_start`` (cluster start-up) and ``actors`` (placement
            and actor construction).

        Raises:
            RunFailed: a step had no finished trial to train on.
            RuntimeError: Ray did not start, the address is unreachable, or placement timed out.
            KeyboardInterrupt: on Ctrl-C, SIGTERM or SIGHUP, after marking the run directory ``interrupted``.
        """
        t_total = time.monotonic()
        try:
            summary = self._run(t_total)
        finally:
            with deferred_signals():
                self.teardown()
        return summary

    def _run(self, t_total: float) -> RunSummary:
        from t1.run.build import _validated_rows, default_run_id
        from t1.run.pools import load_pools

        r = self.recipe
        self.pool, self.warmup_pool, self.warmup_spec = load_pools(r)
        self.validated = _validated_rows(r, self.pool, self.warmup_pool, self.warmup_spec)
        self.cluster = RayCluster.start(r, self.placement)
        t_actors = time.monotonic()
        self._place(default_run_id(r))
        actors_s = time.monotonic() - t_actors
        try:
            if self.resume_from is not None:  # the same run directory, metrics appended
                self.rundir = _reopen(self.resume_from, tensorboard=r.logging.tensorboard)
            else:
                self.rundir = RunDir.create(
                    Path(r.logging.run_root), r.name, self.resolved, tensorboard=r.logging.tensorboard
                )
        except OSError as exc:
            raise ValueError(
                f"logging.run_root={r.logging.run_root!r}: cannot create the run directory there ({exc})"
            ) from None
        summary = RunSummary(run_dir=self.rundir.root)
        summary.wall_s.update(
            setup=time.monotonic() - t_total, ray_start=self.cluster.start_s, actors=actors_s
        )
        self.rundir.write_status("running", 0, None)
        try:
            with self.progress:
                self._run_steps(summary)
        except KeyboardInterrupt:
            with deferred_signals():
                reason = self.stop.reason or SIGNAL_NAMES[signal.SIGINT]
                self.rundir.write_status("interrupted", summary.steps, f"interrupted by {reason}")
            raise
        except BaseException as exc:
            with deferred_signals():
                self.rundir.write_status("failed", summary.steps, f"{type(exc).__name__}: {exc}")
            raise
        summary.wall_s["total"] = time.monotonic() - t_total
        with deferred_signals():
            self.rundir.write_status("finished", summary.steps, None)
        self.console.print(f"run finished in {summary.wall_s['total']:.1f} s -> {self.rundir.root}")
        return summary

    def _place(self, run_id: str) -> None:
        """Reserve the placement group and start every actor in its bundle; wait until all are built."""
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from t1.run.ray.actors import EngineReplica, SandboxHost, TrainerWorker
        from t1_rollout.engine import SamplingParams
        from t1_rollout.scheduler import SchedulerConfig

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
        (b,) = roles["trainer"]
        self.trainer = ray.remote(TrainerWorker).options(**options(b)).remote(r, weights)
        host_cls = ray.remote(SandboxHost)
        self.hosts = [
            host_cls.options(**options(b)).remote(r, self.replicas, run_id) for b in roles["sandbox"]
        ]
        calls = [a.stats.remote() for a in self.replicas + self.hosts] + [self.trainer.pid.remote()]
        answers = ray.get(calls, timeout=ACTOR_START_TIMEOUT_S)
        self.actor_pids = [a["pid"] if isinstance(a, dict) else int(a) for a in answers]
        from t1.run.ray.liveness import LivenessMonitor, Participant

        self.liveness = LivenessMonitor(
            r.liveness,
            [Participant("engine", i, h) for i, h in enumerate(self.replicas)]
            + [Participant("sandbox", i, h) for i, h in enumerate(self.hosts)],
        )
        self.liveness.start()
        self.sampling = SamplingParams.from_spec(
            r.engine.sampling, max_new_tokens=r.rollout.max_new_tokens, seed=r.seed
        )
        self.scheduler = SchedulerConfig.from_spec(r.rollout, samples_per_task=r.ppo.samples_per_task)

    def teardown(self) -> None:
        """Kill this run's actors, remove its placement group, and stop a local cluster (idempotent)."""
        try:
            import ray
        except ImportError:
            return
        if self.liveness is not None:
            self.liveness.close()
        if ray.is_initialized():
            for actor in [*self.hosts, *self.replicas, self.trainer]:
                if actor is not None:
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

    # ---- steps

    def _run_steps(self, summary: RunSummary) -> None:
        import ray

        from t1_tasks import StepTasks

        r = self.recipe
        steps = planned_steps(r, len(self.pool))
        self.console.print(
            f"[bold]t1 train[/] {r.name} on Ray ({r.runtime.mode}, {len(self.replicas)} engine replicas, "
            f"{len(self.hosts)} sandbox host{'s' * (len(self.hosts) != 1)}): {len(self.pool)} tasks, {steps} "
            f"step{'s' * (steps != 1)} -> {self.rundir.root}"
        )
        for key in ("warmup", "rollout", "train", "publish"):
            summary.wall_s[key] = 0.0
        stream = StepTasks.from_spec(self.pool, r.pool)
        start = self._resume(summary, stream) if self.resume_from is not None else 0
        if r.critic_warmup.enabled and self.resume_from is None:  # a checkpoint follows the warm-up
            self._warmup(summary)

        asynchronous, every, ahead = r.runtime.mode == "async", r.trainer.checkpoint_every, lookahead(r)
        self.progress.phase("PPO steps", steps - start)
        self.queued: Any = ()  # batches rolled out beyond the next step's (max_staleness > 1 only)
        if asynchronous and start < steps and self.in_flight is None:  # the pipeline starts: staleness 0
            self.in_flight, self.queued = fill_pipeline(self._collect, stream, start, steps, ahead)
        for step in range(start, steps):
            self.stop.check()
            t_step = time.monotonic()
            if not asynchronous:
                self.in_flight = self._collect(stream, step)
            batch = self.in_flight
            train_ref = self.trainer.ppo_step.remote(batch.samples, batch.staleness)
            self.in_flight = None
            due = bool(every) and (step + 1) % every == 0
            rolled, index = None, step + ahead
            if asynchronous and (index < steps or due):  # overlaps the training of this step
                rolled = self._collect_next(stream, index, planned=index < steps, staleness=ahead)
            self.in_flight = advance(self.queued, rolled) if self.queued else rolled
            t_wait = time.monotonic()
            train_metrics, train_s = ray.get(train_ref)
            wait_s = time.monotonic() - t_wait
            publication = self._publish()
            row = self._row(step, batch, train_metrics, publication)
            row["wall_s"] = {
                "rollout": batch.rollout_s,
                "train": train_s,
                "train_wait": wait_s,
                "publish": publication["publish"],
                "put": publication["put"],
                "step": time.monotonic() - t_step,
            }
            self.rundir.append_metrics(row)
            self.progress.step_done()
            for key in ("rollout", "train", "publish"):
                summary.wall_s[key] += row["wall_s"][key]
            summary.steps += 1
            summary.last_metrics = row
            if due:
                self._checkpoint(summary, stream, publication["version"])
            self.rundir.write_status("running", summary.steps, None)
            out.print_step(self.console, row, steps=steps, table=r.logging.print_table)
        if r.trainer.save_final_weights:
            ray.get(self.trainer.save_weights.remote(str(self.rundir.root)))

    def _row(self, step: int, batch: InFlight, metrics: dict[str, Any], publication: dict) -> dict[str, Any]:
        """The metrics row of one PPO step: the embedded loop's keys plus the replicas' view."""
        r = self.recipe
        deadline = r.liveness.probe_deadline_s
        versions = ask_live(self.liveness, "engine", self.replicas, "weight_version", deadline)
        if set(versions.values()) - {publication["version"]}:
            raise RuntimeError(
                f"step {step}: after publication the replicas serve versions {versions}, the trainer "
                f"{publication['version']}; publication must leave every replica on one version"
            )
        stats = ask_live(self.liveness, "engine", self.replicas, "stats", deadline)
        row: dict[str, Any] = {"phase": "ppo", "step": step, "epochs": batch.epochs}
        row["weight_version_after"] = publication["version"]
        row.update(batch.rollout_metrics)
        row["batch_shortfall"] = r.rollout.admitted - batch.admitted
        row.update(metrics)
        row.update(staleness_histogram(r, batch.samples, metrics["trainer/policy_version"]))
        row["runtime"] = {"kind": "ray", "mode": r.runtime.mode}
        row["replica_requests"] = [
            int(stats[i]["requests"]) if i in stats else None for i in range(len(self.replicas))
        ]
        row["publish_objects"] = publication["puts"]
        row["trials_requeued"] = batch.requeued
        row["participants_lost"] = self.liveness.summary()
        return row

    def _publish(self) -> dict[str, Any]:
        """Publish the trainer's weights to every live replica at the barrier (T1 Appendix 12).

        A replica lost during publication is probed out and the publication retried once, to the replicas
        still behind the trainer's next version only (those a partial publication updated keep it), so every
        live replica ends on one version.
        """
        import ray
        from ray.exceptions import RayError

        deadline = self.recipe.liveness.probe_deadline_s
        for attempt in (0, 1):
            self._reclaim_lost()
            targets = self.liveness.live("engine")
            if attempt:  # after a partial publication: only the replicas still behind the next version
                version = ray.get(self.trainer.policy_version.remote(), timeout=deadline) + 1
                held = ask_live(self.liveness, "engine", self.replicas, "weight_version", deadline)
                targets = [i for i in self.liveness.live("engine") if held.get(i, version) < version]
            ref = self.trainer.publish.remote([self.replicas[i] for i in targets])
            try:
                return wait_publication(self.liveness, ref, targets, self.replicas)
            except RayError:
                if attempt:
                    raise
                ask_live(self.liveness, "engine", self.replicas, "stats", deadline)
                if not any(self.liveness.is_lost("engine", i) for i in targets):
                    raise  # no replica was lost: the failure is the trainer's own
        raise AssertionError("unreachable")

    def _reclaim_lost(self, *, check: bool = True) -> None:
        """Kill the participants lost since the last call; with ``check``, refuse to go on with none left.

        Raises:
            ParticipantsLost: ``check`` and no engine replica or no sandbox host is left.
        """
        import ray

        for p in self.liveness.to_reclaim():
            try:
                ray.kill(p.handle, no_restart=True)
            except Exception:  # already gone
                pass
            left = len(self.liveness.live(p.role))
            self.console.print(
                f"[yellow]lost {p.name}[/]: {self.liveness.cause(p.role, p.index)}; killed, "
                f"{left} {'replica' if p.role == 'engine' else 'host'}{'s' * (left != 1)} left"
            )
        for role, what in (("engine", "engine replica"), ("sandbox", "sandbox host")):
            if check and not self.liveness.live(role):
                causes = "; ".join(self.liveness.summary()[role].values())
                raise ParticipantsLost(
                    f"every {what} of the run was lost, nothing left to go on with: {causes}"
                )

    def _warmup(self, summary: RunSummary) -> None:
        """Critic warm-up (T1 §4.5), synchronous in both modes: rollout, critic update, no publication."""
        import ray

        from t1_tasks import StepTasks

        r = self.recipe
        warm = warmup_steps(r, len(self.warmup_pool))
        stream = StepTasks.from_spec(self.warmup_pool, self.warmup_spec)
        self.progress.phase("critic warm-up", warm)
        for w in range(warm):
            t0 = time.monotonic()
            batch = self._collect(stream, w, label=f"warmup-{w:04d}")
            metrics, train_s = ray.get(self.trainer.critic_warmup_step.remote(batch.samples))
            row = {"phase": "critic_warmup", "step": w, "epochs": batch.epochs, **batch.rollout_metrics}
            row["batch_shortfall"] = r.rollout.admitted - batch.admitted
            row.update(metrics)
            row["wall_s"] = {"rollout": batch.rollout_s, "train": train_s, "step": time.monotonic() - t0}
            self.rundir.append_metrics(row)
            self.progress.step_done()
            summary.wall_s["warmup"] += time.monotonic() - t0
            summary.warmup_steps += 1
            self.console.print(
                f"critic warm-up {w + 1}/{warm}: EV {out.fmt(row.get('critic/explained_variance'))}"
            )

    # ---- rollout

    def _collect(self, stream: Any, index: int, label: str | None = None, staleness: int = 0) -> InFlight:
        """Roll out one batch on the hosts, to train at ``staleness``; refuse to go on if nothing finished."""
        label = label or f"step-{index:04d}"
        self._reclaim_lost()
        t0 = time.monotonic()
        self._requeued, self._fatal = 0, None
        batch = run_interruptible(self._rollout(stream, label))
        if self._fatal is not None:
            raise self._fatal
        rollout_s = time.monotonic() - t0
        samples = admitted_samples(batch, label, self.recipe, self.rundir, self.console)
        return InFlight.of(
            batch,
            samples,
            recipe=self.recipe,
            index=index,
            staleness=staleness,
            rollout_s=rollout_s,
            requeued=self._requeued,
        )

    async def _rollout(self, stream: Any, label: str) -> Any:
        """Collect one oversampled batch; trials run on the hosts, each record is written when it ends."""
        from t1.run.ray.actors import TrialOrder
        from t1_rollout.scheduler import collect_batch

        r = self.recipe
        replica_load = [0] * len(self.replicas)
        host_load = [0] * len(self.hosts)
        verifier_dir = str(self.rundir.verifier_dir)

        def route() -> tuple[int, int]:
            # least loaded live replica (ties: the one that served fewer trials), then least loaded live host
            replicas, hosts = self.liveness.live("engine"), self.liveness.live("sandbox")
            if not replicas or not hosts:
                self._reclaim_lost()  # raises ParticipantsLost, naming the causes
            k = min(replicas, key=lambda i: (replica_load[i], self._served[i], i))
            h = min(hosts, key=lambda i: (host_load[i], i))
            return k, h

        async def run_one(task: Any, record: Any) -> Any:
            for attempt in range(MAX_REQUEUES + 1):
                record.steps = [label]  # a lost attempt's reset (_keep_lost_attempt) clears it
                try:
                    k, h = route()
                except ParticipantsLost as exc:  # failed after collect_batch, not as one trial's cause
                    self._fatal = self._fatal or exc
                    record.status, record.cause = "failed", f"infrastructure: {exc}"
                    self.rundir.write_trajectory(label, record.trial_id, record.to_json())
                    return record
                replica_load[k] += 1
                host_load[h] += 1
                self._served[k] += 1
                seed = trial_seed(r.seed, label, record.launch_index)
                order = TrialOrder(
                    task,
                    record,
                    dataclasses.replace(self.sampling, seed=seed),
                    k,
                    # a re-queued attempt writes its verifier files apart from the lost one's
                    verifier_dir if not attempt else f"{verifier_dir}/requeued-{attempt}",
                    self.validated.get(task.id),
                )
                future = asyncio.wrap_future(self.hosts[h].run_trial.remote(order).future())
                future.add_done_callback(observe)
                try:
                    done, lost = await self._trial_or_loss(future, record, k, h)
                except asyncio.CancelledError:
                    try:  # the host reclaims the sandbox, then answers with the cancelled record
                        if self.liveness.is_lost("sandbox", h):
                            raise LookupError(self.liveness.cause("sandbox", h)) from None
                        self.hosts[h].cancel.remote(record.trial_id)
                        _fill(record, await asyncio.wait_for(future, CANCEL_DEADLINE_S))
                    except Exception as exc:  # the host did not answer in time: keep what the driver knows
                        record.status = "cancelled"
                        record.cause = record.cause or f"scheduler: cancelled; host gave no record ({exc!r})"
                    self.rundir.write_trajectory(label, record.trial_id, record.to_json())
                    raise
                except BaseException:
                    self.rundir.write_trajectory(label, record.trial_id, record.to_json())
                    raise
                finally:
                    replica_load[k] -= 1
                    host_load[h] -= 1
                if lost is None:
                    _fill(record, done)
                    self.rundir.write_trajectory(label, record.trial_id, record.to_json())
                    self.stop.check()
                    out.print_trial(self.console, label, record)
                    return record
                self._keep_lost_attempt(label, record, done, lost, attempt, requeued=attempt < MAX_REQUEUES)
                self._reclaim_lost(check=False)  # kill it now: a slow, not dead, actor must not write on
            record.status = "failed"
            record.cause = f"infrastructure: lost its participants {MAX_REQUEUES + 1} times; last: {lost}"
            self.rundir.write_trajectory(label, record.trial_id, record.to_json())
            out.print_trial(self.console, label, record)
            return record

        self.progress.trials(label, self.scheduler.launched)
        batch = await collect_batch(stream, run_one, self.scheduler, on_trial_done=self.progress.trial_done)
        for rec in batch.cancelled:  # cancelled before they started never reached run_one
            if not (self.rundir.root / "trajectories" / label / f"{rec.trial_id}.json").exists():
                self.rundir.write_trajectory(label, rec.trial_id, rec.to_json())
        return batch

    async def _trial_or_loss(self, future: Any, record: Any, k: int, h: int) -> tuple[Any, str | None]:
        """`t1.run.ray.liveness.trial_or_loss` for this run's replicas and hosts."""
        return await trial_or_loss(
            self.liveness, future, record, (k, self.replicas[k]), (h, self.hosts[h]), CANCEL_DEADLINE_S
        )

    def _keep_lost_attempt(
        self, label: str, record: Any, partial: Any, cause: str | None, attempt: int, *, requeued: bool
    ) -> None:
        """Write a lost attempt as its own failed trajectory (infrastructure, unscored); reset ``record``."""
        kept = lost_attempt(record, partial, cause, attempt, requeued=requeued)
        self.rundir.write_trajectory(label, kept.trial_id, kept.to_json())
        out.print_trial(self.console, label, kept)
        self._requeued += requeued
        _fill(
            record,
            type(record)(record.trial_id, record.task_id, record.family, launch_index=record.launch_index),
        )


def _fill(record: Any, answer: Any) -> None:
    """Copy the host's record of a trial into the scheduler's own record object (it keeps that identity)."""
    for f in dataclasses.fields(answer):
        setattr(record, f.name, getattr(answer, f.name))


__all__ = [
    "ACTOR_START_TIMEOUT_S",
    "CANCEL_DEADLINE_S",
    "MAX_REQUEUES",
    "InFlight",
    "ParticipantsLost",
    "RayRun",
]
