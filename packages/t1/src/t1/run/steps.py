"""What every step of a run shares, whatever runtime runs it: the plan, seeds, the batch unit, refusals.

`t1.run.driver` uses these (and only it runs steps); they are public so that tests and tools compute the
same plan as a run does.
"""

from __future__ import annotations

import dataclasses
import json
import math
import zlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from t1.run.pools import tasks_per_step
from t1.run.run_dir import RunDir
from t1_spec import Recipe

if TYPE_CHECKING:
    from t1.run.resume import RunState
    from t1_rollout.scheduler import BatchResult
    from t1_tito import Sample

BUFFER_KIND = "t1-ray-batch"
"""The ``kind`` of the first record of a rollout buffer (the batch's figures); samples follow. The name is
the format's since its first version (written by the Ray runtime first), kept so old checkpoints load."""


@dataclass
class RunSummary:
    """What a finished run reports.

    Attributes:
        run_dir: the run directory.
        steps: PPO steps completed.
        warmup_steps: critic warm-up steps completed.
        wall_s: wall time per stage, seconds (``setup``, ``warmup``, ``rollout``, ``train``, ``publish``,
            ``total``, and the runtime's own start-up stages, e.g. ``ray_start`` and ``actors``).
        last_metrics: the last step's metrics row.
    """

    run_dir: Path
    steps: int = 0
    warmup_steps: int = 0
    wall_s: dict[str, float] = field(default_factory=dict)
    last_metrics: dict[str, Any] = field(default_factory=dict)


class RunFailed(RuntimeError):
    """A run stopped because a step had nothing to train on; the run directory says why (``status.json``)."""


def trial_seed(seed: int, label: str, launch_index: int) -> int:
    """A sampling seed for one trial, stable across runs: a hash of the recipe seed, the step and the slot."""
    return zlib.crc32(f"{seed}:{label}:{launch_index}".encode()) & 0x7FFFFFFF


def planned_steps(recipe: Recipe, pool_size: int) -> int:
    """PPO steps: ``ppo.steps``, or what ``ppo.epochs`` passes over the pool take, whichever is fewer.

    A pass counts the tasks drawn, ``rollout.launched / ppo.samples_per_task`` per step (a group of trials
    per task): a cancelled trial used up its task's turn in the epoch (the oversampling tail is lost signal,
    T1 §10), as in the task stream itself. Only whole steps that fit in ``epochs`` passes run (floor), so no
    step reaches into a pass beyond them; the tasks left over at the end are not drawn. With partial-rollout
    continuation a step draws fewer fresh tasks (the continued trials hold launch slots, and keep the epoch
    they were drawn in), so the run makes at most ``epochs`` passes, never more.
    """
    by_epochs = pool_size * recipe.ppo.epochs // tasks_per_step(recipe)
    return by_epochs if recipe.ppo.steps is None else min(recipe.ppo.steps, by_epochs)


def warmup_steps(recipe: Recipe, pool_size: int) -> int:
    """Critic warm-up steps: launched trials enough to cover the warm-up pool ``critic_warmup.epochs`` times.

    Rounded up, so every task of the warm-up pool is drawn in each warm-up epoch (T1 §4.5); a step draws
    ``rollout.launched / ppo.samples_per_task`` tasks.
    """
    return -(-pool_size * recipe.critic_warmup.epochs // tasks_per_step(recipe))


def admitted_samples(
    batch: BatchResult, label: str, recipe: Recipe, rundir: RunDir, console: Console
) -> list[Sample]:
    """The TITO samples of a batch's admitted trials; a batch with none stops the run, a short one is said.

    Raises:
        RunFailed: no trial finished (naming the three commonest causes and where every trial's record is).
    """
    samples = [s for rec in batch.admitted for s in rec.samples]
    wanted = recipe.rollout.admitted
    if not samples:
        causes = Counter(rec.cause for rec in batch.failed)
        top = "; ".join(f"{n} x {cause}" for cause, n in causes.most_common(3)) or "no trial finished"
        raise RunFailed(
            f"{label}: no trial finished, nothing to train on ({len(batch.failed)} failed: {top}). "
            f"Every trial's cause is in {rundir.root / 'trajectories' / label}"
        )
    if len(batch.admitted) < wanted:
        console.print(
            f"[yellow]warning:[/] {label}: short batch, {len(batch.admitted)} of {wanted} admitted "
            f"({len(batch.failed)} failed); training on what finished",
            highlight=False,
        )
    return samples


def plain_metrics(metrics: Any) -> dict[str, Any]:
    """A metrics object (dict, dataclass, or one with ``as_dict``) as a flat dict of JSON-ready values."""
    if hasattr(metrics, "as_dict"):
        metrics = metrics.as_dict()
    elif dataclasses.is_dataclass(metrics) and not isinstance(metrics, type):
        metrics = dataclasses.asdict(metrics)
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in dict(metrics).items()}


def json_ready(value: Any) -> Any:
    """``value`` as a metrics row stores it (`t1.run.run_dir.RunDir.append_metrics`), as JSON values.

    Numpy scalars become numbers, non-finite floats None, anything else JSON lacks its ``value`` or string.
    """

    def finite(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: finite(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [finite(x) for x in v]
        if hasattr(v, "item") and not isinstance(v, str):
            v = v.item()
        return None if isinstance(v, float) and not math.isfinite(v) else v

    def other(v: Any) -> Any:
        return v.item() if hasattr(v, "item") else v.value if hasattr(v, "value") else str(v)

    return json.loads(json.dumps(finite(value), default=other, allow_nan=False))


@dataclass
class InFlight:
    """One collected batch not trained yet: what a step trains, and a checkpoint's rollout buffer.

    Attributes:
        index: the PPO step (or warm-up step) that trains it.
        samples: its admitted samples (`t1_tito.Sample`).
        staleness: the staleness the step trains it at (T1 Appendix 12): 0 when the trainer still holds the
            weights that drew it (synchronous mode, the first batch of the asynchronous pipeline), up to
            ``runtime.max_staleness`` when it was drawn while earlier steps trained.
        epochs: the pool epoch of each drawn task.
        rollout_metrics: `t1_rollout.scheduler.BatchResult.metrics` as its row carries it (JSON values).
        admitted: trials admitted.
        rollout_s: wall time of its rollout, seconds.
        requeued: attempts re-queued because their replica or host was lost (a trial re-queued twice counts
            twice; 0 on a runtime with no remote participants).
        batch: the `t1_rollout.scheduler.BatchResult`; None for a batch read back from a checkpoint.
    """

    index: int
    samples: list[Sample]
    staleness: int
    epochs: list[int]
    rollout_metrics: dict[str, Any]
    admitted: int
    rollout_s: float
    requeued: int = 0
    batch: BatchResult | None = field(default=None, repr=False)

    @classmethod
    def of(
        cls,
        batch: BatchResult,
        samples: list[Sample],
        *,
        recipe: Recipe,
        index: int,
        staleness: int,
        rollout_s: float,
        requeued: int = 0,
    ) -> InFlight:
        """The in-flight batch of a finished rollout; its figures are taken now, as JSON values.

        The figures go through the same JSON conversion as a metrics row (`json_ready`), so a
        batch read back from a checkpoint gives the very row the uninterrupted run writes.
        """
        metrics = batch.metrics(compaction_max_failure_rate=recipe.rollout.compaction_max_failure_rate)
        return cls(
            index=index,
            samples=samples,
            staleness=staleness,
            epochs=sorted(set(batch.epochs)),
            rollout_metrics=json_ready(metrics),
            admitted=len(batch.admitted),
            rollout_s=rollout_s,
            requeued=requeued,
            batch=batch,
        )

    def to_records(self) -> list[dict[str, Any]]:
        """The rollout buffer's JSON records: the batch's figures, then one record per sample."""
        head = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("samples", "batch")
        }
        return [{"kind": BUFFER_KIND, **head}, *(s.to_json() for s in self.samples)]

    @classmethod
    def from_records(cls, records: Sequence[Mapping[str, Any]], where: str) -> InFlight:
        """The batch `to_records` wrote, its samples checked (`t1_tito.Sample.from_json`).

        Raises:
            ResumeError: the records are not such a batch, or a sample does not decode; ``where`` names the
                file.
        """
        from t1.run.resume import ResumeError
        from t1_tito import Sample
        from t1_tito.sample import StreamMisalignmentError

        head = dict(records[0]) if records else {}
        if head.pop("kind", None) != BUFFER_KIND:
            raise ResumeError(f"{where}: not a run's rollout buffer (first record kind {BUFFER_KIND!r})")
        try:
            samples = [Sample.from_json(rec, f"{where}: record {i + 2}") for i, rec in enumerate(records[1:])]
        except StreamMisalignmentError as exc:
            raise ResumeError(str(exc)) from None
        try:
            return cls(samples=samples, **head)
        except TypeError as exc:
            raise ResumeError(f"{where}: record 1: not the batch's figures ({exc})") from None


def buffered_batches(state: RunState, checkpoint: Path) -> list[InFlight]:
    """The batches a checkpoint's rollout buffer holds for steps ``state.ppo_steps``, ``+ 1``, ... (in order).

    The buffer is `InFlight.to_records` of each batch, one after the other (each starts with its figures'
    record); empty for a synchronous run.

    Raises:
        ResumeError: the buffer is unusable (naming the file), or its batches are not those of the steps
            from ``state.ppo_steps`` on, one each, as ``state.json`` lists them.
    """
    from t1.run.resume import ResumeError

    where = str(checkpoint / "state" / "rollout_buffer.jsonl")
    starts = [i for i, rec in enumerate(state.rollout_buffer) if rec.get("kind") == BUFFER_KIND]
    if state.rollout_buffer and starts[:1] != [0]:
        InFlight.from_records(state.rollout_buffer, where)  # raises, naming the first record
    ends = [*starts[1:], len(state.rollout_buffer)]
    flights = [
        InFlight.from_records(state.rollout_buffer[a:b], where) for a, b in zip(starts, ends, strict=True)
    ]
    indices = [f.index for f in flights]
    expected = list(range(state.ppo_steps, state.ppo_steps + len(flights)))
    if indices != expected or state.buffered_steps != indices:
        raise ResumeError(
            f"{where}: holds the batches of steps {indices} (state.json lists {state.buffered_steps}), but "
            f"the run resumes at step {state.ppo_steps}"
        )
    return flights


__all__ = [
    "BUFFER_KIND",
    "InFlight",
    "RunFailed",
    "RunSummary",
    "admitted_samples",
    "buffered_batches",
    "json_ready",
    "planned_steps",
    "plain_metrics",
    "trial_seed",
    "warmup_steps",
]
