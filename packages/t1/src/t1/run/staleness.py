"""Bounded staleness of the asynchronous loop: which version draws each batch, and the rollout queue.

``runtime.mode: async`` with ``runtime.max_staleness: k`` lets rollout run up to k weight versions ahead of
training (T1 Appendix 12 describes k = 1; larger k is the fully asynchronous path it leaves to future work).
Weight version v is the actor after v publications, and PPO step t trains while the trainer holds version t
(warm-up publishes nothing). The pipeline starts by rolling out the batches of steps ``start`` to
``start + k - 1`` on the version the trainer holds, then, while step t trains, rolls out the batch of step
t + k on version t. Step t therefore trains the batch drawn by version ``t - staleness`` with
``staleness = min(t - start, k)``: 0, 1, ..., k - 1 while the queue fills, then k. Publication stays at a
barrier per version (the driver's rollout ends before the publication), so no request spans two versions,
and every token keeps the version that sampled it (``sample.policy_version``). At k = 1 this is the one-step
loop exactly: one batch in flight, trained at 0 then 1.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from t1_spec import Recipe

__all__ = [
    "advance",
    "batch_staleness",
    "fill_pipeline",
    "lookahead",
    "staleness_histogram",
    "staleness_problems",
]


def lookahead(recipe: Recipe) -> int:
    """Versions rollout runs ahead of training: ``runtime.max_staleness`` in async mode, 0 in sync mode."""
    return recipe.runtime.max_staleness if recipe.runtime.mode == "async" else 0


def batch_staleness(index: int, start: int, ahead: int) -> int:
    """The staleness PPO step ``index`` trains its batch at, in a pipeline started at step ``start``.

    Args:
        index: the PPO step (>= ``start``).
        start: the step the pipeline (re)started at: 0, or a resumed run's first step.
        ahead: `lookahead` (0: synchronous).

    Raises:
        ValueError: ``index`` is before ``start`` or ``ahead`` is negative.
    """
    if index < start or ahead < 0:
        raise ValueError(
            f"batch_staleness: step {index} before the pipeline's start {start}, or ahead {ahead} < 0"
        )
    return min(index - start, ahead)


def fill_pipeline(
    collect: Callable[..., Any], stream: Any, start: int, steps: int, ahead: int, held: Sequence[Any] = ()
) -> tuple[Any, deque[Any]]:
    """Roll out the batches of steps ``start`` .. ``min(start + ahead, steps) - 1`` on the current version.

    Called before any training of the pipeline. A resumed run passes the batches its checkpoint held
    (``held``, those of steps ``start``, ``start + 1``, ..., each tagged when it was drawn); only the steps
    after them are rolled out now.

    Args:
        collect: the loop's ``_collect(stream, index, staleness=...)``.
        stream: the task stream.
        start: the first PPO step of the pipeline.
        steps: the run's planned PPO steps.
        ahead: `lookahead` (>= 1).
        held: batches already rolled out for steps ``start`` onwards, in step order.

    Returns:
        The batch of step ``start`` (trained at staleness 0 when drawn now) and the queue of the next ones, in
        step order, each drawn now tagged with `batch_staleness` (1 .. k - 1).
    """
    batches = list(held) or [collect(stream, start)]
    for i in range(start + len(batches), min(start + ahead, steps)):
        batches.append(collect(stream, i, staleness=i - start))
    return batches[0], deque(batches[1:])


def advance(queue: deque[Any], rolled: Any | None) -> Any | None:
    """Queue the batch ``rolled`` out during this step (if any) and hand back the next step's batch.

    The queue holds at most k - 1 batches between steps (the next step's batch is apart), so at most k are in
    flight; at k = 1 it is always empty and the next batch is ``rolled`` itself.
    """
    if rolled is not None:
        queue.append(rolled)
    return queue.popleft() if queue else None


def staleness_histogram(bound: int, samples: Iterable[Any], trainer_version: int) -> dict[str, int]:
    """Samples of one batch per staleness: ``rollout/staleness_<j>`` for j = 0 .. ``bound`` (counts).

    ``bound`` is the oldest a sample may be: `lookahead` plus, with partial-rollout continuation, its
    allowance (``rollout.continuation.max_resumes``). A sample's staleness is ``trainer_version -
    sample.policy_version`` (a TITO chunk carries its oldest turn's version). Every j up to the bound is
    present, zero included, so the columns stay the same over a run; a sample outside 0 .. bound (which the
    trainer refuses) counts under its own key.
    """
    counts = {f"rollout/staleness_{j}": 0 for j in range(bound + 1)}
    for s in samples:
        key = f"rollout/staleness_{int(trainer_version) - int(s.policy_version)}"
        counts[key] = counts.get(key, 0) + 1
    return counts


def staleness_problems(recipe: Recipe) -> list[str]:
    """What no runtime runs of ``runtime.max_staleness``, one line each (empty: runnable).

    ``max_staleness`` above 1 in sync mode would be a setting that does nothing, so it is refused. (A
    checkpoint holds every batch in flight, up to k, `t1.run.driver`.)
    """
    runtime, problems = recipe.runtime, []
    if runtime.max_staleness > 1 and runtime.mode != "async":
        problems.append(
            f"runtime.max_staleness {runtime.max_staleness}: only runtime.mode async runs rollout ahead of "
            "training; set runtime.mode to async, or max_staleness to 1"
        )
    return problems
