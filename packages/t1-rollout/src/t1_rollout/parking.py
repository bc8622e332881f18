"""A trial's side of partial-rollout continuation: where it parks, how its deadlines stop meanwhile (T1 §10).

When a batch is full, the scheduler asks each trial of the straggler tail to park (`Parking.ask`) instead of
cancelling it (`t1_rollout.continuation`). The trial parks at its next turn boundary, which the harness
reaches in one of two ways (`t1_rollout.harness`):

- waiting on the engine: the request is aborted (`Parking.unless_asked` cancels it; the embedded engine drops
  it at its next token) and the partial turn is discarded, never recorded; the turn is sampled again, in
  full, after the resume, so no turn mixes two weight versions;
- running a command: the command runs to its end (the shell is never interrupted) and the trial parks before
  its next generation (`Parking.boundary`).

While parked, the trial's coroutine waits on `Parking.boundary` with its sandbox, shell and episode alive,
across the step's training and weight publication, until the next step resumes it (`Parking.resume`) or
cancels it (its sandbox is then reclaimed as on any cancellation). Parked time is not the agent's: the
deadlines registered with `Parking.stopped_while_parked` (the agent deadline and the remote deadline of
`t1_rollout.trial.run_trial`) are stopped while parked and moved on by the parked time at the resume, and
`parked_s` lets the harness leave it out of its own deadline check and of ``agent_time_s``. A trial parked
across ``max_resumes`` steps is bounded by the steps it may wait, not by its deadlines.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Iterator
from typing import Any

__all__ = ["ParkRequested", "Parking"]


class ParkRequested(Exception):  # noqa: N818 - a request, not an error
    """The scheduler asked the trial to park while it waited on the engine; the request was aborted."""


class Parking:
    """The handshake between the scheduler and one trial (partial-rollout continuation, T1 §10).

    One per trial, created by the scheduler (`t1_rollout.scheduler.collect_batch` with a continuation) and
    reused over every step the trial runs in. Single event loop only (the run's persistent loop).

    Attributes:
        parked_s: seconds spent parked so far, over every park.
        parks: how many times the trial parked.
    """

    def __init__(self) -> None:
        self._asked = asyncio.Event()
        self._parked = asyncio.Event()
        self._resumed = asyncio.Event()
        self._deadlines: list[asyncio.Timeout] = []
        self.parked_s = 0.0
        self.parks = 0

    @property
    def asked(self) -> bool:
        """Whether the scheduler asked the trial to park and has not resumed it since."""
        return self._asked.is_set()

    @property
    def parked(self) -> bool:
        """Whether the trial waits at a turn boundary now."""
        return self._parked.is_set()

    # ---- the scheduler's side

    def ask(self) -> None:
        """Ask the trial to park at its next turn boundary (the batch is full)."""
        self._resumed.clear()
        self._asked.set()

    async def wait_parked(self) -> None:
        """Return once the trial waits at a turn boundary."""
        await self._parked.wait()

    def resume(self) -> None:
        """Let a parked trial go on (under whatever weights the engine serves now); a no-op when not asked."""
        self._asked.clear()
        self._resumed.set()

    # ---- the trial's side

    @contextlib.contextmanager
    def stopped_while_parked(self, *deadlines: asyncio.Timeout) -> Iterator[None]:
        """Within the block, ``deadlines`` stop while the trial is parked and move on by the parked time."""
        self._deadlines.extend(deadlines)
        try:
            yield
        finally:
            for deadline in deadlines:
                self._deadlines.remove(deadline)

    async def boundary(self) -> None:
        """A turn boundary: when asked, park here until resumed; return at once otherwise.

        The registered deadlines are stopped while parked (rescheduled to never) and, at the resume, set to
        what was left of them. A cancellation while parked propagates (the trial then reclaims its sandbox).
        """
        if not self._asked.is_set():
            return
        loop = asyncio.get_running_loop()
        start = loop.time()
        held = [(d, d.when()) for d in self._deadlines]
        for deadline, _ in held:
            deadline.reschedule(None)
        self.parks += 1
        self._parked.set()
        try:
            await self._resumed.wait()
        finally:
            self._parked.clear()
            self.parked_s += loop.time() - start
        now = loop.time()
        for deadline, when in held:
            if when is not None:
                deadline.reschedule(when + (now - start))

    async def unless_asked[T](self, work: Coroutine[Any, Any, T]) -> T:
        """Await ``work`` (an engine call); when parking is asked first, cancel it and raise `ParkRequested`.

        A ``work`` that finishes although parking was asked meanwhile is returned (its turn is whole); the
        trial parks at its next boundary.

        Raises:
            ParkRequested: ``work`` was cancelled because the trial is to park (nothing of it is kept).
            Exception: whatever ``work`` raised.
        """
        task = asyncio.ensure_future(work)
        asked = asyncio.ensure_future(self._asked.wait())
        try:
            await asyncio.wait({task, asked}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            asked.cancel()
            if not task.done():
                task.cancel()  # the engine drops the request (EmbeddedEngine.generate on cancellation)
                await asyncio.wait({task})
        if task.cancelled():
            raise ParkRequested
        return task.result()
