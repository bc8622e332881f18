"""Checkpoints and resume of the Ray loop, in the embedded loop's format (`t1.run.resume`).

A checkpoint is taken at a publication barrier, every ``trainer.checkpoint_every`` PPO steps, when the
trainer is idle (the step has trained and published) and no trial runs. It is written from two processes
into one folder of the layout `t1.run.resume` describes: the trainer worker writes the weights, the
optimizer states, its counters and RNG states (`TrainerWorker.save_checkpoint`); the driver writes the
rollout buffer and ``state.json`` (task stream position, the replicas' weight version, the rows written).

The one-step asynchronous loop (T1 Appendix 12) has, at the barrier after step t, the batch of step t+1
already collected: drawn by version t while step t trained, so it must be trained at staleness 1 by step
t+1. The checkpoint saves that batch as its rollout buffer (`InFlight.to_records`: the admitted samples
with their four streams, versions and rewards, and the rollout figures their row needs), and the stream
position after its draws. A resumed run trains exactly that batch at staleness 1 first, with the replicas
given the restored weights under the restored version before any generation, and the pipeline then goes
on as it would have: the rollout of step t+2 runs on version t+1 while step t+1 trains. So that a run
that ends at its plan can be extended exactly (``--resume RUN_DIR ppo.steps=N``), a checkpoint due after
the last planned step still rolls out the next batch (overlapping the last training step) to save it; the
batch is not trained by that run, and a run whose extra rollout finishes no trial saves the checkpoint
without it (its resume then restarts the pipeline: one step at staleness 0). The synchronous loop has
nothing in flight at a barrier, and its buffer is empty.

Not kept across a resume: the replicas' request counters (``replica_requests`` counts from the resumed
replicas' start), the routing history that breaks ties between equally loaded replicas, and lost
participants (the resumed run places all of them anew).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from t1.run.loop import RunFailed, RunSummary
from t1.run.resume import ResumeError, RunState
from t1_spec import Recipe

BUFFER_KIND = "t1-ray-batch"
"""The ``kind`` of the first record of a Ray run's rollout buffer (the batch's figures); samples follow."""


@dataclass
class InFlight:
    """One collected batch not trained yet: the rollout buffer of the Ray loop.

    Attributes:
        index: the PPO step (or warm-up step) that trains it.
        samples: its admitted samples (`t1_tito.Sample`).
        staleness: the staleness the step trains it at (T1 Appendix 12): 0 when the trainer still holds the
            weights that drew it (synchronous mode, the first batch of the asynchronous pipeline), 1 when it
            was drawn while the step before trained.
        epochs: the pool epoch of each drawn task.
        rollout_metrics: `t1_rollout.scheduler.BatchResult.metrics` as its row carries it (JSON values).
        admitted: trials admitted.
        rollout_s: wall time of its rollout, seconds.
        requeued: attempts re-queued because their replica or host was lost (a trial re-queued twice counts
            twice).
        batch: the `t1_rollout.scheduler.BatchResult`; None for a batch read back from a checkpoint.
    """

    index: int
    samples: list[Any]
    staleness: int
    epochs: list[int]
    rollout_metrics: dict[str, Any]
    admitted: int
    rollout_s: float
    requeued: int = 0
    batch: Any = field(default=None, repr=False)

    @classmethod
    def of(
        cls, batch: Any, samples: list[Any], *, recipe: Recipe, index: int, staleness: int, **timing: Any
    ) -> InFlight:
        """The in-flight batch of a finished rollout; its figures are taken now, as JSON values.

        The figures go through the same JSON conversion as a metrics row (`t1.run.run_dir.RunDir`), so a
        batch read back from a checkpoint gives the very row the uninterrupted run writes.

        Args:
            batch: the `t1_rollout.scheduler.BatchResult`.
            samples: its admitted samples.
            recipe: the recipe (``rollout.compaction_max_failure_rate``).
            index: the step that trains it.
            staleness: see the class.
            timing: ``rollout_s`` and ``requeued``.
        """
        metrics = batch.metrics(compaction_max_failure_rate=recipe.rollout.compaction_max_failure_rate)
        return cls(
            index=index,
            samples=samples,
            staleness=staleness,
            epochs=sorted(set(batch.epochs)),
            rollout_metrics=_as_json(metrics),
            admitted=len(batch.admitted),
            batch=batch,
            **timing,
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
        from t1_tito import Sample
        from t1_tito.sample import StreamMisalignmentError

        head = dict(records[0]) if records else {}
        if head.pop("kind", None) != BUFFER_KIND:
            raise ResumeError(f"{where}: not a Ray run's rollout buffer (first record kind {BUFFER_KIND!r})")
        try:
            samples = [Sample.from_json(rec, f"{where}: record {i + 2}") for i, rec in enumerate(records[1:])]
        except StreamMisalignmentError as exc:
            raise ResumeError(str(exc)) from None
        try:
            return cls(samples=samples, **head)
        except TypeError as exc:
            raise ResumeError(f"{where}: record 1: not the batch's figures ({exc})") from None


def save_checkpoint(
    checkpoint: Path,
    *,
    recipe: Recipe,
    resolved: Mapping[str, Any],
    trainer: Any,
    stream: Any,
    ppo_steps: int,
    warmup_steps: int,
    weight_version: int,
    metrics_path: Path,
    in_flight: InFlight | None,
) -> Path:
    """Save the run state at a barrier: the trainer worker's part, then the driver's (`t1.run.resume`).

    Args:
        checkpoint: ``<run>/checkpoints/step-NNNN``.
        recipe: the run's recipe.
        resolved: the resolved recipe as plain data.
        trainer: the `t1.run.ray.actors.TrainerWorker` handle (idle: the step has trained and published).
        stream: the PPO task stream (its position after the in-flight batch's draws).
        ppo_steps: PPO steps completed.
        warmup_steps: critic warm-up steps completed.
        weight_version: the version every replica serves (the last publication's).
        metrics_path: ``metrics.jsonl`` (its lines are counted).
        in_flight: the batch collected for step ``ppo_steps``, or None.

    Returns:
        The path of ``state.json``.

    Raises:
        RuntimeError: the driver cannot see a file the trainer wrote (`t1.run.resume.save_state`).
    """
    import ray

    from t1.run.resume import save_state

    part = ray.get(trainer.save_checkpoint.remote(str(checkpoint), recipe.trainer.checkpoint_optimizer))
    return save_state(
        checkpoint,
        recipe=recipe,
        resolved=resolved,
        trainer=part,
        weight_version=weight_version,
        stream=stream,
        ppo_steps=ppo_steps,
        warmup_steps=warmup_steps,
        metrics_rows=len(metrics_path.read_text().splitlines()) if metrics_path.is_file() else 0,
        rollout_buffer=in_flight.to_records() if in_flight is not None else (),
        buffered_steps=[in_flight.index] if in_flight is not None else (),
    )


def resume_from(
    checkpoint: Path, *, run_dir: Path, trainer: Any, replicas: list[Any], stream: Any, deadline_s: float
) -> tuple[RunState, InFlight | None]:
    """Load a checkpoint into a freshly placed Ray run, before any generation.

    Rows and trajectories the interrupted process wrote after it move aside (`t1.run.resume.supersede_after`,
    which keeps the buffered batch's trajectories); the trainer worker loads its part
    (`TrainerWorker.restore_checkpoint`) and gives the restored weights to every replica under the saved
    version (`TrainerWorker.load_replicas`); the task stream is set to the saved position; the rollout buffer
    is read back.

    Args:
        checkpoint: ``<run>/checkpoints/step-NNNN`` (`t1.run.resume.open_run` chose it).
        run_dir: the run directory.
        trainer: the trainer worker's handle.
        replicas: every engine replica's handle (all at version 0, fresh).
        stream: a fresh PPO task stream.
        deadline_s: deadline of the replicas' version query (seconds).

    Returns:
        The `t1.run.resume.RunState` and the batch of step ``ppo_steps`` from the buffer, or None.

    Raises:
        ResumeError: the checkpoint or its buffer is unusable (naming the file), or the buffered batch is
            not the next step's.
        RuntimeError: a replica does not serve the restored version after loading it.
    """
    import ray

    from t1.run.resume import load_state, restore_stream, supersede_after

    state = load_state(checkpoint)
    where = str(checkpoint / "state" / "rollout_buffer.jsonl")
    flight = InFlight.from_records(state.rollout_buffer, where) if state.rollout_buffer else None
    if flight is not None and (flight.index != state.ppo_steps or state.buffered_steps != [flight.index]):
        raise ResumeError(
            f"{where}: holds the batch of step {flight.index} (state.json lists {state.buffered_steps}), but "
            f"the run resumes at step {state.ppo_steps}"
        )
    supersede_after(run_dir, state)
    ray.get(trainer.restore_checkpoint.remote(dataclasses.replace(state, rollout_buffer=[])))
    ray.get(trainer.load_replicas.remote(replicas, state.weight_version))  # bulk: no deadline
    versions = ray.get([h.weight_version.remote() for h in replicas], timeout=deadline_s)
    if set(versions) != {state.weight_version}:
        raise RuntimeError(
            f"resume from {checkpoint}: the replicas serve versions {versions} after loading the restored "
            f"weights, not {state.weight_version}"
        )
    restore_stream(state, stream)
    return state, flight


class RayCheckpoints:
    """The checkpoint side of `t1.run.ray.loop.RayRun` (a mixin: it reads the run's attributes).

    It uses ``recipe``, ``resolved``, ``console``, ``rundir``, ``trainer``, ``replicas``, ``resume_from``,
    ``in_flight`` and the run's ``_collect``.
    """

    def _resume(self, summary: RunSummary, stream: Any) -> int:
        """Load ``resume_from`` into the placed actors and the stream (`t1.run.ray.checkpoint.resume_from`).

        Returns:
            The first PPO step to run.
        """
        state, self.in_flight = resume_from(
            self.resume_from,
            run_dir=self.rundir.root,
            trainer=self.trainer,
            replicas=self.replicas,
            stream=stream,
            deadline_s=self.recipe.liveness.probe_deadline_s,
        )
        summary.steps, summary.warmup_steps = state.ppo_steps, state.warmup_steps
        self.rundir.write_status("running", state.ppo_steps, None)
        held = (
            "" if self.in_flight is None else f", with step {state.ppo_steps}'s batch from its rollout buffer"
        )
        self.console.print(
            f"resumed from {self.resume_from} after PPO step {state.ppo_steps} (weight version "
            f"{state.weight_version}{held})"
        )
        return state.ppo_steps

    def _checkpoint(self, summary: RunSummary, stream: Any, weight_version: int) -> None:
        """Save the run state at this barrier, the in-flight batch as its rollout buffer."""
        save_checkpoint(
            self.rundir.root / "checkpoints" / f"step-{summary.steps:04d}",
            recipe=self.recipe,
            resolved=self.resolved,
            trainer=self.trainer,
            stream=stream,
            ppo_steps=summary.steps,
            warmup_steps=summary.warmup_steps,
            weight_version=weight_version,
            metrics_path=self.rundir.metrics_path,
            in_flight=self.in_flight,
        )

    def _collect_next(self, stream: Any, index: int, *, planned: bool, staleness: int = 1) -> InFlight | None:
        """Roll out step ``index``'s batch during the training of step ``index - staleness`` (default 1).

        A batch beyond the planned steps is rolled out only for the checkpoint after the last step
        (`t1.run.ray.checkpoint`); when none of its trials finishes, the run still ends well, and that
        checkpoint goes without it.
        """
        try:
            return self._collect(stream, index, staleness=staleness)
        except RunFailed as exc:
            if planned:
                raise
            self.console.print(
                f"[yellow]warning:[/] the batch for the last checkpoint: {exc}", highlight=False
            )
            return None


def _as_json(value: Any) -> Any:
    """``value`` as a metrics row stores it: non-finite floats as None, numpy scalars as numbers."""
    from t1.run.run_dir import _finite, _jsonable

    return json.loads(json.dumps(_finite(value), default=_jsonable, allow_nan=False))


__all__ = ["BUFFER_KIND", "InFlight", "RayCheckpoints", "resume_from", "save_checkpoint"]
