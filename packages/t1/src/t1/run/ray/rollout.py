"""Where a trial of a Ray run runs: routing to a replica and a host, re-queueing, and parking (T1 §7, §10).

The driver draws the tasks and admits trials (`t1.run.driver`, `t1_rollout.scheduler.collect_batch`); each
trial runs on a `SandboxHost`, generating on the replica the driver assigned it (the least loaded live one
when the trial starts, ties to the one that served fewer trials; a trajectory stays on one replica).

Liveness (T1 §7.3, `t1.run.ray.liveness`): a trial whose replica or host is lost (probe failed or
unanswered, or a call to it failed because its actor died) is kept as an infrastructure failure under its
own file (``<trial id>-lost<n>.json``, never scored) and re-queued on the live participants, at most
`MAX_REQUEUES` times, its verifier files apart (``verifier/requeued-<n>/``); the lost actor is killed when
the driver acts on the loss, at the latest at the next barrier. A run left with no engine replica or no
sandbox host fails after that rollout, naming the causes (`ParticipantsLost`). Re-queued attempts do not
take sandbox creation tokens again (`t1_rollout.scheduler` paces first attempts only).

Partial-rollout continuation (T1 §10) runs the scheduler's handshake (`t1_rollout.parking.Parking`) in
the driver and the trial's coroutine on the host: when the scheduler asks a trial to park, the driver asks
its host (`SandboxHost.park`), waits until the host's trial waits at a turn boundary
(`SandboxHost.wait_parked`, which answers the record as it stands), and only then parks the driver's side;
the host keeps the parked coroutine (sandbox, shell, episode) alive across the training and the
publication, and `SandboxHost.resume` lets it go on under the new weights when the next step continues it.
A parked trial cancelled at the end of the run is cancelled on its host, which reclaims its sandbox.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from t1.run import console as out
from t1.run.ray.liveness import LivenessMonitor, lost_attempt, observe, trial_or_loss
from t1.run.runtime import RunContext
from t1_spec import Recipe
from t1_tasks import Task

if TYPE_CHECKING:
    from t1_rollout.engine import SamplingParams
    from t1_rollout.parking import Parking
    from t1_rollout.trial import TrialRecord

CANCEL_DEADLINE_S = 120.0
"""How long the driver waits for a cancelled trial's record after asking its host to cancel it (seconds):
the host reclaims the sandbox first (T1 §7 probe deadline)."""

MAX_REQUEUES = 3
"""Times one trial is re-queued after losing its replica or host before it is recorded as failed
(infrastructure, not scored): a bound, so that a run losing participants one after another still ends."""

DRIVER_FIELDS = ("steps", "resumes", "parking")
"""Fields of a trial's record that the driver keeps (the scheduler's), never overwritten by a host's."""


class ParticipantsLost(RuntimeError):
    """Every engine replica, or every sandbox host, of the run was lost: nothing is left to go on with."""


class RayTrials:
    """Runs the trials of a Ray run on its hosts and replicas (see the module).

    Args:
        recipe: the recipe.
        replicas: the engine replica handles.
        hosts: the sandbox host handles.
        liveness: the run's monitor of both.
        validated: task id -> its validation row.
        reclaim: the runtime's ``reclaim_lost(check=...)`` (kills lost actors; with ``check`` raises
            `ParticipantsLost` when a role has none left).
    """

    def __init__(
        self,
        recipe: Recipe,
        replicas: list[Any],
        hosts: list[Any],
        liveness: LivenessMonitor,
        validated: dict[str, Any],
        reclaim: Callable[..., None],
    ) -> None:
        self.recipe = recipe
        self.replicas = replicas
        self.hosts = hosts
        self.liveness = liveness
        self.validated = validated
        self.reclaim = reclaim
        self.context: RunContext | None = None
        self.served = [0] * len(replicas)
        self.replica_load = [0] * len(replicas)
        self.host_load = [0] * len(hosts)
        self.requeued = 0
        self.fatal: ParticipantsLost | None = None
        self.bridge_failed: dict[str, str] = {}  # trial id -> why its parking handshake broke

    def begin(self) -> None:
        """Before a batch: reclaim what was lost, reset the batch's counters."""
        self.reclaim()
        self.requeued, self.fatal = 0, None

    def end(self) -> int:
        """After a batch: its re-queued attempts; raises the loss that left no participant of a role."""
        if self.fatal is not None:
            raise self.fatal
        return self.requeued

    def route(self) -> tuple[int, int]:
        """The least loaded live replica (ties: fewer trials served), then the least loaded live host."""
        replicas, hosts = self.liveness.live("engine"), self.liveness.live("sandbox")
        if not replicas or not hosts:
            self.reclaim()  # raises ParticipantsLost, naming the causes
        k = min(replicas, key=lambda i: (self.replica_load[i], self.served[i], i))
        h = min(hosts, key=lambda i: (self.host_load[i], i))
        return k, h

    async def run_trial(
        self, task: Task, record: TrialRecord, sampling: SamplingParams, label: str
    ) -> TrialRecord:
        """Run one trial on a host, re-queued on a loss; fills ``record`` and returns it."""
        from t1.run.ray.actors import TrialOrder

        rundir, steps = self.context.rundir, list(record.steps)
        verifier_dir = str(rundir.verifier_dir)
        lost: str | None = None
        for attempt in range(MAX_REQUEUES + 1):
            try:
                k, h = self.route()
            except ParticipantsLost as exc:  # failed after collect_batch, not as one trial's cause
                self.fatal = self.fatal or exc
                record.status, record.cause = "failed", f"infrastructure: {exc}"
                return record
            self.replica_load[k] += 1
            self.host_load[h] += 1
            self.served[k] += 1
            order = TrialOrder(
                task,
                _for_host(record),
                sampling,
                k,
                # a re-queued attempt writes its verifier files apart from the lost one's
                verifier_dir if not attempt else f"{verifier_dir}/requeued-{attempt}",
                self.validated.get(task.id),
                parks=record.parking is not None,
            )
            future = asyncio.wrap_future(self.hosts[h].run_trial.remote(order).future())
            future.add_done_callback(observe)
            bridge = (
                asyncio.ensure_future(self._bridge(record, h, future)) if record.parking is not None else None
            )
            try:
                done, lost = await self.wait_trial(future, record, k, h)
            except asyncio.CancelledError:
                try:  # the host reclaims the sandbox, then answers with the cancelled record
                    if self.liveness.is_lost("sandbox", h):
                        raise LookupError(self.liveness.cause("sandbox", h)) from None
                    self.hosts[h].cancel.remote(record.trial_id)
                    fill(record, await asyncio.wait_for(future, CANCEL_DEADLINE_S))
                except Exception as exc:  # the host did not answer in time: keep what the driver knows
                    record.status = "cancelled"
                    record.cause = record.cause or f"scheduler: cancelled; host gave no record ({exc!r})"
                raise
            finally:
                if bridge is not None:
                    bridge.cancel()
                self.replica_load[k] -= 1
                self.host_load[h] -= 1
            if lost is None:
                fill(record, done)
                broken = self.bridge_failed.pop(record.trial_id, None)
                if broken is not None:  # its host cancelled it: the run's failure, never the agent's
                    record.status, record.cause = "failed", broken
                return record
            self._keep_lost_attempt(label, record, done, lost, attempt, requeued=attempt < MAX_REQUEUES)
            fill(
                record,
                type(record)(
                    record.trial_id, record.task_id, record.family, launch_index=record.launch_index
                ),
            )
            record.steps = list(steps)
            self.reclaim(check=False)  # kill it now: a slow, not dead, actor must not write on
        record.status = "failed"
        record.cause = f"infrastructure: lost its participants {MAX_REQUEUES + 1} times; last: {lost}"
        return record

    async def wait_trial(
        self, future: asyncio.Future[Any], record: TrialRecord, k: int, h: int
    ) -> tuple[Any, str | None]:
        """The trial's record, or the loss of its replica ``k`` or host ``h`` (`liveness.trial_or_loss`)."""
        return await trial_or_loss(
            self.liveness, future, record, (k, self.replicas[k]), (h, self.hosts[h]), CANCEL_DEADLINE_S
        )

    async def _bridge(self, record: TrialRecord, h: int, future: asyncio.Future[Any]) -> None:
        """Carry the scheduler's parking requests to the trial on host ``h``, and its resumes back.

        Runs beside the trial until it ends: each time the scheduler asks the trial to park, the host is
        asked too; once the host's trial waits at a turn boundary (its record as it stands copied here),
        the driver's side parks (`Parking.boundary`) until the scheduler resumes it, and then the host's.
        A trial that ends instead of parking leaves the handshake to the scheduler (it sees it end).
        """
        try:
            await self._carry_parking(record, self.hosts[h], future)
        except Exception as exc:  # a broken handshake must not leave the host's trial parked for good
            self.bridge_failed[record.trial_id] = (
                f"infrastructure: the continuation handshake with sandbox host {h} failed ({exc!r}); "
                "its trial was cancelled on the host"
            )
            self.hosts[h].cancel.remote(record.trial_id)

    async def _carry_parking(self, record: TrialRecord, host: Any, future: asyncio.Future[Any]) -> None:
        """The handshake of `_bridge` with the trial on ``host``, until the trial ends."""
        parking: Parking = record.parking
        while not future.done():
            try:
                await parking.unless_asked(asyncio.Event().wait())  # returns only by the request
            except _park_requested():
                pass
            host.park.remote(record.trial_id)
            snapshot = await asyncio.wrap_future(host.wait_parked.remote(record.trial_id).future())
            if snapshot is None:  # it ended before it reached a boundary
                return
            fill(record, snapshot)
            await parking.boundary()  # parked here as on the host, until the next step resumes it
            resumed = asyncio.wrap_future(host.resume.remote(record.trial_id).future())
            await asyncio.wait_for(resumed, CANCEL_DEADLINE_S)

    def _keep_lost_attempt(
        self,
        label: str,
        record: TrialRecord,
        partial: Any,
        cause: str | None,
        attempt: int,
        *,
        requeued: bool,
    ) -> None:
        """Write a lost attempt as its own failed trajectory (infrastructure, unscored)."""
        rundir, console = self.context.rundir, self.context.console
        kept = lost_attempt(record, partial, cause, attempt, requeued=requeued)
        kept.parking = None
        rundir.write_trajectory(label, kept.trial_id, kept.to_json())
        out.print_trial(console, label, kept)
        self.requeued += requeued


def _park_requested() -> type[Exception]:
    from t1_rollout.parking import ParkRequested

    return ParkRequested


def _for_host(record: TrialRecord) -> TrialRecord:
    """The record a host starts from: the driver's, without the driver's parking handle."""
    return dataclasses.replace(record, parking=None)


def fill(record: TrialRecord, answer: TrialRecord) -> None:
    """Copy the host's record of a trial into the scheduler's own record object (it keeps that identity).

    The driver's own fields (`DRIVER_FIELDS`: the steps it ran in, its resumes, its parking handle) stay.
    """
    for f in dataclasses.fields(answer):
        if f.name not in DRIVER_FIELDS:
            setattr(record, f.name, getattr(answer, f.name))


__all__ = ["CANCEL_DEADLINE_S", "MAX_REQUEUES", "ParticipantsLost", "RayTrials", "fill"]
