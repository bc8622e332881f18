"""Partial-rollout continuation of the oversampling tail, the scheduler's side (T1 §7.4, §10).

Oversampling admits the first trials to finish and cancels the rest (T1 §7.4); the cancelled tail
concentrates the longest trajectories and the slowest families, a selection bias the paper names, with
partial-rollout continuation as the direction against it (T1 §10). With ``rollout.continuation.enabled``, when
a batch is full (`t1_rollout.scheduler.collect_batch` with a `Continuation`):

- a trial that has not started (no sandbox yet) is cancelled, as without continuation;
- a trial already continued ``max_resumes`` times is cancelled, as without continuation;
- every other trial is asked to park at its next turn boundary (`t1_rollout.parking`): one waiting on the
  engine has its request aborted and its partial turn discarded; one running a command parks when the
  command returns. A trial past its agent phase (verifier, reward, stitching) has no boundary left: if it
  finishes within the same bound, its finished record is carried to the next batch (it is neither
  re-verified nor lost); otherwise it is cancelled;
- the scheduler waits at most ``park_timeout_s`` for all of them; a trial neither parked nor ended by then is
  cancelled, as without continuation, and its sandbox reclaimed before the batch returns.

The parked trials (coroutine suspended, sandbox, shell and episode alive) and the carried finished records
are held by the `Continuation` across the step's training and weight publication; this needs the one event
loop that runs every step of the run (`t1.run.driver`). The next batch continues them first: they take the
first launch slots (and a concurrency slot each, but no sandbox creation), so ``launched - len(carried)``
fresh tasks are drawn, none of them a task a carried trial holds. A continued trial's earlier turns keep
their ids, log-probs, routing rows and weight version; its new turns carry the version the engine serves
now, so its TITO sample mixes versions (``policy_versions_mixed``) and the trainer takes the rollout's
per-token log-probs as the ratio's behaviour policy (`t1_trainer.step`). `Continuation.cancel_all` cancels
whatever is still parked at the end of a run, or on its failure or interruption.

In a step's retention tables (`t1_rollout.retention`) a parked or carried trial's outcome is ``continued``;
in the step that continues it, it has its own outcome again (kept, cancelled, ...).

Groups (``ppo.samples_per_task > 1``) are not built with continuation: a group straddling two steps would
hold members of different versions under one GRPO baseline (`t1.run.preflight` refuses it).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from t1_rollout.trial import TrialRecord
from t1_spec import RolloutSpec
from t1_tasks import Task

__all__ = ["Continuation", "ContinuationConfig", "Parked", "Tail", "settle_tail"]


@dataclass(frozen=True)
class ContinuationConfig:
    """Limits of partial-rollout continuation (the recipe's ``rollout.continuation``, `from_spec`).

    Attributes:
        max_resumes: later steps one trial may be continued in (>= 1).
        park_timeout_s: how long the tail may take to park once the batch is full, seconds (> 0).
    """

    max_resumes: int
    park_timeout_s: float

    def __post_init__(self) -> None:
        """Refuse limits no batch can run under.

        Raises:
            ValueError: ``max_resumes`` not an int >= 1, or ``park_timeout_s`` not a finite number > 0.
        """
        if (
            isinstance(self.max_resumes, bool)
            or not isinstance(self.max_resumes, int)
            or self.max_resumes < 1
        ):
            raise ValueError(f"ContinuationConfig.max_resumes must be an int >= 1, got {self.max_resumes!r}")
        if not (isinstance(self.park_timeout_s, int | float) and math.isfinite(self.park_timeout_s)):
            raise ValueError(
                f"ContinuationConfig.park_timeout_s must be a finite number, got {self.park_timeout_s!r}"
            )
        if self.park_timeout_s <= 0:
            raise ValueError(f"ContinuationConfig.park_timeout_s must be > 0, got {self.park_timeout_s}")

    @classmethod
    def from_spec(cls, rollout: RolloutSpec) -> ContinuationConfig | None:
        """The limits of ``rollout.continuation``; None when it is off (the tail is cancelled)."""
        spec = rollout.continuation
        if not spec.enabled:
            return None
        return cls(max_resumes=spec.max_resumes, park_timeout_s=spec.park_timeout_s)


@dataclass
class Parked:
    """One trial carried from a full batch to the next.

    Attributes:
        future: the batch's future of the trial: pending while it is parked at a turn boundary, done when it
            finished within the park bound (its result is the finished record).
        record: the trial's record (``record.parking`` is its handle).
        task: the task it runs.
        epoch: the pool epoch its task was drawn from (it keeps it in every step it runs in).
    """

    future: asyncio.Future[TrialRecord]
    record: TrialRecord
    task: Task
    epoch: int


class Continuation:
    """The trials a run carries from one batch to the next, and their limits.

    Args:
        config: the limits (`ContinuationConfig.from_spec`).
    """

    def __init__(self, config: ContinuationConfig) -> None:
        self.config = config
        self._carried: list[Parked] = []

    def __len__(self) -> int:
        return len(self._carried)

    @property
    def records(self) -> list[TrialRecord]:
        """The carried trials' records, in the order the next batch launches them."""
        return [p.record for p in self._carried]

    def task_ids(self) -> frozenset[str]:
        """Ids of the tasks the carried trials hold (the next batch draws none of them fresh)."""
        return frozenset(p.task.id for p in self._carried)

    def keep(self, parked: Parked) -> None:
        """Carry ``parked`` to the next batch (after those kept before it)."""
        self._carried.append(parked)

    def take(self) -> list[Parked]:
        """Hand every carried trial to a batch, which continues them; each counts one more resume."""
        taken, self._carried = self._carried, []
        for p in taken:
            p.record.resumes += 1
        return taken

    async def cancel_all(self, cause: str) -> list[TrialRecord]:
        """Cancel every parked trial and wait for their sandboxes to be reclaimed; drop the carried records.

        Args:
            cause: why, appended to each record's cause (e.g. ``"the run ended"``).

        Returns:
            The records, each ``cancelled`` with its cause, or ``finished`` (a carried finished record, never
            trained on; its cause says so).
        """
        taken, self._carried = self._carried, []
        for p in taken:
            p.future.cancel()
        if taken:
            await asyncio.gather(*(p.future for p in taken), return_exceptions=True)
        for p in taken:
            rec = p.record
            if rec.status != "finished":
                rec.status = "cancelled"
            note = f"continuation: {cause} while it was carried to the next step"
            rec.cause = f"{rec.cause}; {note}" if rec.cause else note
        return [p.record for p in taken]


@dataclass
class Tail:
    """What became of a full batch's tail under continuation (`settle_tail`).

    Attributes:
        parked: trials parked at a turn boundary (to carry).
        finished: trials that finished within the park bound (to carry, finished).
        ended: trials that ended otherwise within the bound (failed): the batch takes them in as failures.
        over_limit: trials cancelled because they were continued ``max_resumes`` times already.
        unstarted: trials cancelled before they started (no sandbox).
        late: trials cancelled because they neither parked nor ended within ``park_timeout_s``.
    """

    parked: list[asyncio.Future[TrialRecord]] = field(default_factory=list)
    finished: list[asyncio.Future[TrialRecord]] = field(default_factory=list)
    ended: list[asyncio.Future[TrialRecord]] = field(default_factory=list)
    over_limit: list[asyncio.Future[TrialRecord]] = field(default_factory=list)
    unstarted: list[asyncio.Future[TrialRecord]] = field(default_factory=list)
    late: list[asyncio.Future[TrialRecord]] = field(default_factory=list)


async def settle_tail(
    pending: Mapping[asyncio.Future[TrialRecord], TrialRecord],
    started: set[asyncio.Future[TrialRecord]],
    config: ContinuationConfig,
) -> Tail:
    """Park a full batch's tail: ask, wait up to ``config.park_timeout_s``, and sort the trials out.

    Unstarted and over-limit trials are cancelled at once, late ones once the bound has passed
    (``future.cancel()``); the caller awaits every cancelled future, so each sandbox is reclaimed before its
    batch returns. A trial without a parking handle cannot park and counts as late.

    Args:
        pending: the batch's unfinished trials, future -> record.
        started: the futures whose trial has passed the concurrency gate (a sandbox exists or is starting).
        config: the limits.

    Returns:
        The `Tail`; every future of ``pending`` is in exactly one of its lists.
    """
    tail = Tail()
    asked: dict[asyncio.Future[TrialRecord], TrialRecord] = {}
    for fut, rec in pending.items():
        if fut not in started:
            tail.unstarted.append(fut)
        elif rec.resumes >= config.max_resumes:
            tail.over_limit.append(fut)
        elif fut.done():  # ended in the same wake-up as the batch filled
            (tail.finished if _finished(fut) else tail.ended).append(fut)
        elif rec.parking is None:
            tail.late.append(fut)
        else:
            rec.parking.ask()
            asked[fut] = rec
    for fut in tail.unstarted + tail.over_limit + tail.late:
        fut.cancel()
    settling = [asyncio.ensure_future(_settled(fut, rec)) for fut, rec in asked.items()]
    try:
        if settling:
            await asyncio.wait(settling, timeout=config.park_timeout_s)
    finally:
        for s in settling:
            s.cancel()
    for fut, rec in asked.items():
        if fut.done():
            (tail.finished if _finished(fut) else tail.ended).append(fut)
        elif rec.parking is not None and rec.parking.parked:
            tail.parked.append(fut)
        else:
            tail.late.append(fut)
            fut.cancel()
    return tail


def _finished(fut: asyncio.Future[TrialRecord]) -> bool:
    """A done future whose trial finished (a reward exists)."""
    return not fut.cancelled() and fut.exception() is None and fut.result().status == "finished"


async def _settled(fut: asyncio.Future[TrialRecord], rec: TrialRecord) -> None:
    """Return once the trial of ``fut`` is parked or has ended."""
    assert rec.parking is not None  # only asked trials are settled
    parked = asyncio.ensure_future(rec.parking.wait_parked())
    try:
        await asyncio.wait({fut, parked}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        parked.cancel()
