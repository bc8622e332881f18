"""A deterministic straggler tail for the continuation tests: which trials park is decided, not raced.

Partial-rollout continuation parks the trials still mid-episode when a batch is full (T1 §10). Which ones
those are depends on timing (sandbox start-up, the engine's turn order, verifier times), so a test that
needs a parked trial with a turn already sampled, and needs it trained on in the next step, would race. The
gate orders the trials' engine calls instead; the engine, sandboxes, scheduler and trainer run as they are.

In the first batch that has parking handles (``launched`` trials, ``admitted`` of them to fill it):

- the first ``admitted`` trials to call the engine are **free**: they sample their first turn, then wait
  until every other trial has sampled one too, then run to their end (and fill the batch);
- the others are **held**: they sample their first turn and then wait, before their second call, until the
  scheduler asks them to park. So when the batch fills every held trial is mid-episode with one turn
  sampled under the first weight version, and parks.

In the later batches, a trial the first batch did not hold waits before each engine call until the first
held trial has ended (its whole trial, verifier included), so that trial, which continues under the next
weight version, is the first the next batch admits. Every wait ends early when the trial is asked to park;
the call is then dropped as the scheduler's own request would drop it (`t1_rollout.parking.ParkRequested`).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any


class ParkGate:
    """The gate's state, shared by the patched `Parking` methods and `run_trial` (see the module)."""

    def __init__(self, launched: int, admitted: int) -> None:
        self.launched = launched
        self.admitted = admitted
        self.first_batch: list[object] = []  # Parking handles of the first batch, in the order they called
        self.calls: dict[int, int] = {}  # id(Parking) -> engine calls made
        self.asked: dict[int, asyncio.Event] = {}
        self.sampled_held = 0
        self.all_held_sampled = asyncio.Event()
        self.held_trial_ended = asyncio.Event()

    def asked_event(self, parking: object) -> asyncio.Event:
        """Set while the trial of ``parking`` is asked to park (by `Parking.ask`; cleared at its resume)."""
        return self.asked.setdefault(id(parking), asyncio.Event())

    def held(self, parking: object) -> bool:
        """Whether ``parking`` belongs to a held trial of the first batch."""
        return parking in self.first_batch[self.admitted :]

    async def _until(self, parking: object, event: asyncio.Event) -> bool:
        """Wait for ``event`` or a park request; True when the trial was asked to park."""
        asked = self.asked_event(parking)
        waits = {asyncio.ensure_future(event.wait()), asyncio.ensure_future(asked.wait())}
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        return asked.is_set()

    async def before_call(self, parking: object) -> bool:
        """Hold an engine call as the module says; True when the call is to be dropped (park requested)."""
        n = self.calls[id(parking)] = self.calls.get(id(parking), 0) + 1
        if n == 1 and len(self.first_batch) < self.launched and parking not in self.first_batch:
            self.first_batch.append(parking)
        if parking in self.first_batch:
            if self.held(parking):
                if n == 1:
                    return False
                if n == 2:
                    self.sampled_held += 1
                    if self.sampled_held == self.launched - self.admitted:
                        self.all_held_sampled.set()
                    return await self._until(parking, asyncio.Event())  # only a park request ends it
                return False  # continued after its park: runs freely
            if n == 2:  # a free trial: its second call once every held trial has sampled a turn
                return await self._until(parking, self.all_held_sampled)
            return False
        return await self._until(parking, self.held_trial_ended)


def install(launched: int, admitted: int, setattr_: Callable[[Any, str, Any], None] = setattr) -> ParkGate:
    """Patch `t1_rollout.parking.Parking` and `t1_rollout.trial.run_trial` with a fresh `ParkGate`.

    Args:
        launched: ``rollout.launched`` of the run.
        admitted: ``rollout.admitted`` of the run.
        setattr_: ``monkeypatch.setattr`` in a test (undone after it), plain ``setattr`` in a run's process.
    """
    from t1_rollout import parking as parking_module
    from t1_rollout import trial as trial_module

    gate = ParkGate(launched, admitted)
    Parking = parking_module.Parking
    unless_asked, ask, resume = Parking.unless_asked, Parking.ask, Parking.resume
    run_trial = trial_module.run_trial

    async def gated_unless_asked(self: Any, work: Coroutine[Any, Any, Any]) -> Any:
        if await gate.before_call(self):
            work.close()  # the request was never sent: nothing of the turn exists
            raise parking_module.ParkRequested
        return await unless_asked(self, work)

    def gated_ask(self: Any) -> None:
        ask(self)
        gate.asked_event(self).set()

    def gated_resume(self: Any) -> None:
        resume(self)
        gate.asked_event(self).clear()

    @functools.wraps(run_trial)
    async def watched_run_trial(*args: Any, **kwargs: Any) -> Any:
        record = kwargs.get("record")
        try:
            return await run_trial(*args, **kwargs)
        finally:
            if record is not None and record.parking is not None and gate.held(record.parking):
                gate.held_trial_ended.set()

    setattr_(Parking, "unless_asked", gated_unless_asked)
    setattr_(Parking, "ask", gated_ask)
    setattr_(Parking, "resume", gated_resume)
    setattr_(trial_module, "run_trial", watched_run_trial)
    return gate
