"""Liveness of the Ray runtime's participants: two-stage probes and a record of who was lost (T1 §7.3).

Each engine replica and sandbox host is probed on its own schedule: nothing during the grace after placement
(``liveness.probe_grace_s``, 600 s: first-step compilation and cold caches are slow by construction), then
one probe every ``liveness.probe_period_s`` (30 s), each of which must be answered within
``liveness.probe_deadline_s`` (120 s). A probe that raises (the actor died) or is not answered in time (the
process hangs or is stopped) marks the participant lost, with that cause. The driver also marks a
participant lost at once when a call to it fails because its actor died, without waiting for a probe.

The driver routes no new trial to a lost participant, re-queues the trials it held (`t1.run.ray.rollout`), and
kills it (`LivenessMonitor.to_reclaim`) when it acts on the loss, at the latest at the next barrier; the
run goes on with the rest. A transient outage (``ActorUnavailableError``) counts as a loss too: its trials
are re-queued, never scored. The trainer worker is not probed here: it is a single worker whose loss fails
the run.

The probes run in a daemon thread with its own event loop, so they go on while the driver waits on training
or publication as well as during rollout.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from t1_spec import LivenessSpec

Role = Literal["engine", "sandbox"]

LOST_POLL_S = 0.2
"""How often a coroutine waiting on `LivenessMonitor.lost` looks at the record (seconds)."""


@dataclass(frozen=True)
class Participant:
    """One probed actor of the run.

    Attributes:
        role: ``engine`` (an engine replica) or ``sandbox`` (a sandbox host).
        index: its index among the participants of that role.
        handle: the Ray actor handle (what `probe` is called with, through the participant).
    """

    role: Role
    index: int
    handle: Any

    @property
    def name(self) -> str:
        """``engine replica <i>`` or ``sandbox host <i>``."""
        return f"{'engine replica' if self.role == 'engine' else 'sandbox host'} {self.index}"


def ray_probe(participant: Participant) -> Awaitable[Any]:
    """The probe of a Ray participant: its ``stats`` method, as an awaitable of the caller's loop."""
    return asyncio.wrap_future(participant.handle.stats.remote().future())


class LivenessMonitor:
    """Probes participants on the schedule of a `LivenessSpec` and records the ones lost.

    Args:
        spec: the recipe's ``liveness`` section (grace, period, deadline; seconds).
        participants: the engine replicas and sandbox hosts to probe.
        probe: returns an awaitable answered by a live participant (default: `ray_probe`); it raises or
            never finishes for a lost one.
        clock: a monotonic clock (seconds).

    ``start`` launches the probe thread; ``close`` stops it (idempotent). `mark_lost`, `is_lost`, `lost` and
    `to_reclaim` are safe to call from any thread.
    """

    def __init__(
        self,
        spec: LivenessSpec,
        participants: list[Participant],
        probe: Callable[[Participant], Awaitable[Any]] = ray_probe,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.spec = spec
        self.participants = list(participants)
        self.probe = probe
        self.clock = clock
        self.causes: dict[tuple[str, int], str] = {}
        self.reclaimed: set[tuple[str, int]] = set()
        self.probes_sent = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = clock()

    # ---- the record

    def mark_lost(self, role: Role, index: int, cause: str) -> bool:
        """Record a participant as lost with its cause; True the first time, False when already lost."""
        with self._lock:
            if (role, index) in self.causes:
                return False
            self.causes[(role, index)] = cause
            return True

    def is_lost(self, role: Role, index: int) -> bool:
        """Whether that participant is recorded lost."""
        with self._lock:
            return (role, index) in self.causes

    def cause(self, role: Role, index: int) -> str | None:
        """Why that participant was lost (None while it is live)."""
        with self._lock:
            return self.causes.get((role, index))

    def live(self, role: Role) -> list[int]:
        """Indices of the participants of ``role`` not recorded lost, in order."""
        with self._lock:
            return [
                p.index for p in self.participants if p.role == role and (role, p.index) not in self.causes
            ]

    async def lost(self, role: Role, index: int) -> str:
        """Return (with the cause) once that participant is recorded lost; polls every `LOST_POLL_S`.

        Raises:
            RuntimeError: the probe thread ended while the monitor is open (nothing would find a hang).
        """
        while True:
            cause = self.cause(role, index)
            if cause is not None:
                return cause
            if self._thread is not None and not self._thread.is_alive() and not self._stop.is_set():
                raise RuntimeError("the liveness probe thread ended while the run is going on")
            await asyncio.sleep(LOST_POLL_S)

    def to_reclaim(self) -> list[Participant]:
        """The participants lost since the last call (each returned once: the barrier kills them)."""
        with self._lock:
            fresh = [
                p
                for p in self.participants
                if (p.role, p.index) in self.causes and (p.role, p.index) not in self.reclaimed
            ]
            self.reclaimed.update((p.role, p.index) for p in fresh)
        return fresh

    def summary(self) -> dict[str, dict[str, str]]:
        """``{"engine": {index: cause}, "sandbox": {index: cause}}`` of the participants lost so far."""
        with self._lock:
            out: dict[str, dict[str, str]] = {"engine": {}, "sandbox": {}}
            for (role, index), cause in sorted(self.causes.items()):
                out[role][str(index)] = cause
            return out

    # ---- probing

    async def probe_once(self, participant: Participant) -> bool:
        """Probe one participant now, within the deadline; mark it lost and return False when it fails."""
        if self.is_lost(participant.role, participant.index):
            return False
        deadline = self.spec.probe_deadline_s
        with self._lock:
            self.probes_sent += 1
        try:
            await asyncio.wait_for(self.probe(participant), deadline)
            return True
        except TimeoutError:
            cause = f"{participant.name} did not answer a liveness probe within {deadline:g} s"
        except Exception as exc:  # the actor died: Ray raises its own error types
            cause = f"{participant.name} failed a liveness probe ({type(exc).__name__}: {exc})"
        self.mark_lost(participant.role, participant.index, _one_line(cause))
        return False

    async def _watch_one(self, participant: Participant) -> None:
        grace_left = self.spec.probe_grace_s - (self.clock() - self._started)
        if await self._sleep(max(0.0, grace_left)):
            return
        while not self.is_lost(participant.role, participant.index):
            began = self.clock()
            try:
                await self.probe_once(participant)
            except Exception as exc:  # noqa: BLE001 - a probe's own failure must not end the schedule
                self.mark_lost(participant.role, participant.index, _one_line(f"{participant.name}: {exc!r}"))
            if await self._sleep(max(0.0, self.spec.probe_period_s - (self.clock() - began))):
                return

    async def _sleep(self, seconds: float) -> bool:
        """Sleep, waking early when closed; True when closed."""
        end = self.clock() + seconds
        while not self._stop.is_set():
            left = end - self.clock()
            if left <= 0:
                return False
            await asyncio.sleep(min(left, LOST_POLL_S))
        return True

    async def _watch(self) -> None:
        await asyncio.gather(*(self._watch_one(p) for p in self.participants))

    def start(self) -> None:
        """Start probing in a daemon thread; the grace runs from construction."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=asyncio.run, args=(self._watch(),), name="t1-liveness", daemon=True
        )
        self._thread.start()

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the probe schedule and wait at most ``timeout_s`` for the thread.

        A probe in flight runs to its deadline in the daemon thread.
        """
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)


# ---- the driver's side of a trial (`t1.run.ray.rollout.RayTrials`)


async def trial_or_loss(
    monitor: LivenessMonitor,
    future: Any,
    record: Any,
    replica: tuple[int, Any],
    host: tuple[int, Any],
    cancel_deadline_s: float = 120.0,
) -> tuple[Any, str | None]:
    """Wait for a trial's record, or for the loss of its replica or its host.

    Args:
        monitor: the run's monitor.
        future: the awaitable of the host's ``run_trial`` answer.
        record: the driver's `t1_rollout.trial.TrialRecord` of the trial (its id names it to the host).
        replica: ``(index, handle)`` of the engine replica the trial generates on.
        host: ``(index, handle)`` of the sandbox host it runs on.
        cancel_deadline_s: how long a live host has to answer with the cancelled record (seconds).

    Every answer is checked before it is accepted: a trial whose replica or host was recorded lost, or
    whose replica fails a probe right after it (a hung replica makes a trial end on the agent's deadline,
    which would otherwise be verified and scored), is a lost attempt, never a result.

    Returns:
        ``(record, None)`` for a trial that ended on live participants; ``(partial record or None, cause)``
        for one whose replica or host was lost: the host's record when it answered (after a cancel it
        reclaimed the sandbox first), None when the host was lost or gave no record within
        ``cancel_deadline_s``.
    """
    from ray.exceptions import NodeDiedError, ObjectLostError, RayActorError

    (k, replica_handle), (h, host_handle) = replica, host
    watchers = {
        asyncio.ensure_future(monitor.lost("engine", k)): "engine",
        asyncio.ensure_future(monitor.lost("sandbox", h)): "sandbox",
    }
    try:
        finished, _ = await asyncio.wait({future, *watchers}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in watchers:
            w.cancel()
    if future in finished:
        try:
            answer = future.result()
        except (RayActorError, ObjectLostError, NodeDiedError) as exc:  # the host died under the trial
            monitor.mark_lost("sandbox", h, f"sandbox host {h} died during a trial ({type(exc).__name__})")
            return None, monitor.cause("sandbox", h)
        if monitor.is_lost("sandbox", h):
            return answer, monitor.cause("sandbox", h)
        if not await monitor.probe_once(Participant("engine", k, replica_handle)):
            return answer, monitor.cause("engine", k)
        return answer, None
    if any(watchers[w] == "sandbox" for w in finished if w in watchers):
        return None, monitor.cause("sandbox", h)
    if monitor.is_lost("sandbox", h):
        return None, monitor.cause("engine", k)
    host_handle.cancel.remote(record.trial_id)  # the host reclaims the sandbox, then answers
    try:
        return await asyncio.wait_for(asyncio.shield(future), cancel_deadline_s), monitor.cause("engine", k)
    except Exception:  # the host gave no record in time: the driver's own is kept
        return None, monitor.cause("engine", k)


def ask_live(
    monitor: LivenessMonitor, role: Role, handles: list[Any], method: str, deadline_s: float
) -> dict:
    """Call ``method`` on every live participant of ``role`` together; return ``{index: answer}``.

    A participant whose call raises, or is not answered within ``deadline_s`` seconds, is marked lost with
    that cause and left out of the answer.
    """
    import ray

    refs = {i: getattr(handles[i], method).remote() for i in monitor.live(role)}
    if not refs:
        return {}
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=deadline_s)
    answered = set(ready)
    out: dict[int, Any] = {}
    for i, ref in refs.items():
        name = Participant(role, i, None).name
        if ref not in answered:
            monitor.mark_lost(role, i, f"{name} did not answer {method} within {deadline_s:g} s")
            continue
        try:
            out[i] = ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - the actor died: Ray raises its own error types
            monitor.mark_lost(role, i, _one_line(f"{name} failed {method} ({type(exc).__name__}: {exc})"))
    return out


def wait_publication(monitor: LivenessMonitor, ref: Any, indices: list[int], handles: list[Any]) -> Any:
    """Wait for the trainer's publication to the replicas ``indices``; kill any of them lost meanwhile.

    Weight transfers carry no deadline (bulk, T1 §7.3); a replica that hangs during one is found by the
    probes, and killing it ends the trainer's call to it with an error, so this wait always ends.

    Raises:
        ray.exceptions.RayError: the publication failed (a replica lost during it, or the trainer's own).
    """
    import ray

    while True:
        ready, _ = ray.wait([ref], timeout=LOST_POLL_S * 5)
        if ready:
            return ray.get(ref)
        for i in indices:
            if monitor.is_lost("engine", i):
                with contextlib.suppress(Exception):
                    ray.kill(handles[i], no_restart=True)


def lost_attempt(record: Any, partial: Any, cause: str | None, attempt: int, *, requeued: bool) -> Any:
    """The record kept for a trial attempt that lost its replica or host (a copy; ``record`` is unchanged).

    Args:
        record: the driver's record of the trial.
        partial: the host's record of the attempt, when it answered, else None.
        cause: why the participant was lost.
        attempt: the attempt's number from 0.
        requeued: whether the trial runs again.

    Returns:
        A `t1_rollout.trial.TrialRecord` with id ``<trial id>-lost<attempt + 1>``, status ``failed``, no
        reward and the cause ``infrastructure: <cause>; re-queued`` (or that the bound was reached).
    """
    kept = dataclasses.replace(partial if partial is not None else record)
    kept.trial_id = f"{record.trial_id}-lost{attempt + 1}"
    kept.status = "failed"
    kept.reward = None
    then = "; re-queued" if requeued else "; not re-queued (the bound was reached)"
    kept.cause = f"infrastructure: {cause}{then}"
    return kept


async def probe_all(monitor: LivenessMonitor, participants: list[Participant]) -> None:
    """Probe ``participants`` now, together (`LivenessMonitor.probe_once`)."""
    await asyncio.gather(*(monitor.probe_once(p) for p in participants))


def observe(future: Any) -> None:
    """Retrieve an abandoned trial future's outcome, so that a lost host's error is not logged as unseen."""
    if not future.cancelled():
        future.exception()


def _one_line(text: str) -> str:
    first = " ".join(text.split())
    return first if len(first) <= 300 else first[:297] + "..."


__all__ = [
    "LOST_POLL_S",
    "LivenessMonitor",
    "Participant",
    "ask_live",
    "lost_attempt",
    "observe",
    "probe_all",
    "ray_probe",
    "trial_or_loss",
    "wait_publication",
]
