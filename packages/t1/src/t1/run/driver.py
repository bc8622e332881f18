"""The one step driver of a training run: every step of every runtime goes through this loop.

One step (T1 §2, Fig. 2): the scheduler launches ``rollout.launched`` trials on tasks taken in the pool's
per-epoch seeded order, admits the first ``rollout.admitted`` that finish and cancels the tail (§7.4), or,
with ``rollout.continuation.enabled``, parks it to continue first in the next step (§10); every admitted
trial is stitched into samples whose four streams stay aligned (§4.1); the trainer computes the critic's
pre-update values, GAE, updates the critic and then the actor with routing replay (§4.2, §4.5); the new
actor weights are published to every engine with generation quiesced, so the weight version advances by one
(Appendix 12). Critic warm-up (§4.5) runs the same step with the critic update only and no publication, its
tail cancelled. Every ``evaluation.every_steps`` PPO steps the suites are evaluated on the weights just
published (§6); every ``trainer.checkpoint_every`` the whole state is saved (`t1.run.resume`).

Where the parts live is the runtime's (`t1.run.runtime.Runtime`, by ``runtime.kind``): in this process
(`t1.run.inprocess`) or on Ray (`t1.run.ray.runtime`). With ``runtime.mode: async`` (a runtime that trains
apart from the driver) the rollout of step t + k runs on version t while step t trains
(``runtime.max_staleness: k``, `t1.run.staleness`): the driver submits the training, rolls out the next
batch, then waits for both at the barrier and publishes. A checkpoint saves the batch in flight as its
rollout buffer; a resumed run trains that batch first, at the staleness it was drawn for.

Every rollout of a run, and its evaluations, run on one event loop (an ``asyncio.Runner`` the driver
holds), so that a parked trial (its coroutine, and on Ray its host's) outlives the step; the trials still
parked when the run ends, fails or is stopped are cancelled with every signal absorbed
(`t1.run.signals.run_shielded`) and recorded, their sandboxes reclaimed before the run returns.
"""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from rich.console import Console

from t1.run import console as out
from t1.run.preflight import preflight, refuse_unless_ok
from t1.run.run_dir import RunDir
from t1.run.runtime import Publication, RunContext, RunInputs, Runtime
from t1.run.runtimes import RUNTIMES
from t1.run.signals import SIGNAL_NAMES, StopToken, deferred_signals, run_interruptible, run_shielded
from t1.run.staleness import advance, fill_pipeline, lookahead, staleness_histogram
from t1.run.steps import (
    InFlight,
    RunFailed,
    RunSummary,
    admitted_samples,
    buffered_batches,
    planned_steps,
    trial_seed,
    warmup_steps,
)
from t1_spec import Recipe

if TYPE_CHECKING:
    from t1_rollout.continuation import Continuation
    from t1_rollout.scheduler import BatchResult
    from t1_rollout.trial import TrialRecord
    from t1_tasks import StepTasks, Task

Phase = Literal["critic_warmup", "ppo"]


class Run:
    """One training run of a recipe: preflight, start the runtime, critic warm-up, PPO steps, final weights.

    Args:
        recipe: the validated recipe.
        resolved: the resolved recipe as plain data (written into the run directory).
        console: where progress and the per-step table go.
        stop: the stop token the signal handlers set (`t1.run.signals.stop_signals`).
        resume_from: a checkpoint folder of an earlier run of this recipe (``<run>/checkpoints/step-NNNN``,
            `t1.run.resume.open_run`): the run continues in that run directory from that checkpoint's state.

    Raises:
        PreflightError: the recipe cannot run here (a backend not built, a setting the runtime does not run,
            a host prerequisite missing, a plan the capacity model refuses), before any work; a
            ``PreflightInputError`` (also a ``ValueError``) when a pool or ``logging.run_root`` is unusable.
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
        self.preflight = preflight(recipe)
        out.print_notes(self.console, recipe, self.preflight)
        refuse_unless_ok(self.preflight)
        self.runtime: Runtime = RUNTIMES.load(recipe.runtime.kind).from_spec(recipe)
        self.progress = out.RunProgress(self.console)  # bars on a terminal only
        self.rundir: RunDir | None = None
        self.inputs: RunInputs | None = None
        self.runner = asyncio.Runner()  # the one event loop of every rollout (parked trials live on it)
        self._loop_closed = False
        self.continuation: Continuation | None = None

    @property
    def run_dir(self) -> Path | None:
        """The run directory, once start-up has created it (None before)."""
        return self.rundir.root if self.rundir is not None else None

    def run(self) -> RunSummary:
        """Start the runtime, run critic warm-up (if enabled) and the PPO steps; write the run directory.

        ``status.json`` in the run directory says how the run ended: ``finished``, ``failed`` (with the error)
        or ``interrupted`` (with the signal), with the steps completed. The run directory is created after
        the runtime has started, so a recipe that fails to build leaves nothing behind. The runtime is
        closed on every path (`Runtime.close`: the engine's thread stopped, or Ray's actors killed).

        Returns:
            The `RunSummary`.

        Raises:
            RunFailed: a step had no finished trial to train on (no weights are written).
            ValueError: ``logging.run_root`` became unusable after the preflight checked it.
            KeyboardInterrupt: on Ctrl-C, SIGTERM or SIGHUP, after marking the run directory
                ``interrupted``; the sandboxes of the trials in flight are reclaimed first.
        """
        t_total = time.monotonic()
        try:
            return self._run(t_total)
        finally:
            with deferred_signals():
                self._close_loop("the run ended", quiet=True)
                self.runtime.close()

    def _run(self, t_total: float) -> RunSummary:
        r = self.recipe
        self.inputs = self.runtime.start()
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
        self.runtime.attach(RunContext(self.rundir, self.console, self.stop))
        summary = RunSummary(run_dir=self.rundir.root)
        summary.wall_s.update(setup=time.monotonic() - t_total, **self.runtime.start_wall_s)
        # "running" until the end: a run killed outright (SIGKILL, power loss) still says it did not finish
        self.rundir.write_status("running", 0, None)
        try:
            with self.progress:
                self._run_steps(summary)
            self._close_loop("the run ended")
        except KeyboardInterrupt:
            self._close_loop("the run was interrupted", quiet=True)
            with deferred_signals():  # a second signal must not leave the status at "running"
                reason = self.stop.reason or SIGNAL_NAMES[signal.SIGINT]  # Python's handler records none
                self.rundir.write_status("interrupted", summary.steps, f"interrupted by {reason}")
            raise
        except BaseException as exc:
            self._close_loop("the run failed", quiet=True)
            with deferred_signals():
                self.rundir.write_status("failed", summary.steps, f"{type(exc).__name__}: {exc}")
            raise
        summary.wall_s["total"] = time.monotonic() - t_total
        with deferred_signals():
            self.rundir.write_status("finished", summary.steps, None)
        self.console.print(f"run finished in {summary.wall_s['total']:.1f} s -> {self.rundir.root}")
        return summary

    # ---- the steps

    def _run_steps(self, summary: RunSummary) -> None:
        from t1_rollout.continuation import Continuation, ContinuationConfig
        from t1_tasks import StepTasks

        r, inputs = self.recipe, self.inputs
        steps = planned_steps(r, len(inputs.pool))
        config = ContinuationConfig.from_spec(r.rollout)
        self.continuation = Continuation(config) if config is not None else None
        self.console.print(
            f"[bold]t1 train[/] {r.name}{self.runtime.describe()}: {len(inputs.pool)} tasks, {steps} "
            f"step{'s' * (steps != 1)}, {r.rollout.launched} launched / {r.rollout.admitted} admitted per "
            f"step -> {self.rundir.root}"
        )
        for key in ("warmup", "rollout", "train", "publish"):
            summary.wall_s[key] = 0.0
        stream = StepTasks.from_spec(inputs.pool, r.pool)
        buffered = self._resume(summary, stream) if self.resume_from is not None else []
        start = summary.steps
        if r.critic_warmup.enabled and self.resume_from is None:  # a checkpoint follows the warm-up
            self._warmup(summary)

        ahead, every = lookahead(r), r.trainer.checkpoint_every
        self.progress.phase("PPO steps", steps - start)
        # the next step's batch, and the queue of those rolled out beyond it (max_staleness > 1)
        in_flight, queued = (buffered[0], deque(buffered[1:])) if buffered else (None, deque())
        if ahead and start < steps:  # the pipeline (re)starts: what the buffer lacks is drawn now
            in_flight, queued = fill_pipeline(self._collect, stream, start, steps, ahead, held=buffered)
        last_due = steps - steps % every - 1 if every else -1  # the last step a checkpoint follows
        for step in range(start, steps):
            self.stop.check()
            t_step = time.monotonic()
            due = bool(every) and (step + 1) % every == 0
            # a checkpoint after this step saves no parked trial: the batch rolled out for it cancels its tail
            batch = in_flight if ahead else self._collect(stream, step, park_tail=not due)
            in_flight = None
            self.stop.check()
            pending = self.runtime.train_ppo(
                batch.samples,
                staleness=batch.staleness,
                continuation_lag=self._lag(),
                max_staleness=ahead + self._lag(),
            )
            rolled, index = None, step + ahead
            # overlaps the training of this step; beyond the plan only for a checkpoint still to come
            if ahead and (index < steps or step <= last_due):
                rolled = self._collect_next(
                    stream, index, planned=index < steps, staleness=ahead, park_tail=not due
                )
            if ahead:  # the next step's batch: the oldest queued one, or the one just rolled out
                in_flight = advance(queued, rolled) if queued else rolled
            t_wait = time.monotonic()
            train_metrics, train_s = pending.result()
            wait_s = time.monotonic() - t_wait
            publication = self.runtime.publish()
            row = self._row(step, batch, train_metrics, publication)
            row["wall_s"] = {
                "rollout": batch.rollout_s,
                "train": train_s,
                "train_wait": wait_s,
                **publication.wall_s,
                "step": time.monotonic() - t_step,
            }
            self.rundir.append_metrics(row)
            self.progress.step_done()
            for key in ("rollout", "train", "publish"):
                summary.wall_s[key] += row["wall_s"][key]
            summary.steps += 1
            summary.last_metrics = row
            if due:
                held = [in_flight, *queued] if in_flight is not None else []
                self._checkpoint(summary, stream, held)
            self.rundir.write_status("running", summary.steps, None)
            out.print_step(self.console, row, steps=steps, table=r.logging.print_table)
            if r.evaluation.enabled and summary.steps % r.evaluation.every_steps == 0:
                self._evaluate(step, publication.version)

        self.release_parked("the run ended")
        self.stop.check()  # a stop asked while they were released: the run ends interrupted, not finished
        if r.trainer.save_final_weights:
            self.runtime.save_weights(self.rundir.root)

    def _lag(self) -> int:
        """Versions a continued sample may lag beyond its step's staleness (`t1_trainer.step`)."""
        from t1_trainer.step import continuation_lag

        return continuation_lag(self.recipe.rollout)

    def _row(
        self, step: int, batch: InFlight, metrics: dict[str, Any], publication: Publication
    ) -> dict[str, Any]:
        """The metrics row of one PPO step (its ``wall_s`` added by the caller)."""
        r = self.recipe
        row: dict[str, Any] = {"phase": "ppo", "step": step, "epochs": batch.epochs}
        row["weight_version_after"] = publication.version
        row.update(batch.rollout_metrics)
        row["batch_shortfall"] = r.rollout.admitted - batch.admitted
        row.update(metrics)
        if lookahead(r) + self._lag():  # staleness can vary: say how it did (at bound 0 the trainer checks 0)
            bound = lookahead(r) + self._lag()
            row.update(staleness_histogram(bound, batch.samples, metrics["trainer/policy_version"]))
        row.update(self.runtime.row_extras(step, batch, publication))
        return row

    def _warmup(self, summary: RunSummary) -> None:
        """Critic warm-up (T1 §4.5), synchronous on every runtime: rollout, critic update, no publication."""
        from t1_tasks import StepTasks

        r, inputs = self.recipe, self.inputs
        warm = warmup_steps(r, len(inputs.warmup_pool))
        stream = StepTasks.from_spec(inputs.warmup_pool, inputs.warmup_pool_spec)
        self.progress.phase("critic warm-up", warm)
        for w in range(warm):
            t0 = time.monotonic()
            batch = self._collect(stream, w, label=f"warmup-{w:04d}", carry=False)
            metrics, train_s = self.runtime.train_critic(batch.samples).result()
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
            out.print_warnings(self.console, row)

    # ---- rollout

    def _collect(
        self,
        stream: StepTasks,
        index: int,
        *,
        label: str | None = None,
        staleness: int = 0,
        carry: bool = True,
        park_tail: bool = True,
    ) -> InFlight:
        """Roll out one batch to train at ``staleness``; refuse to go on when nothing finished.

        ``carry``: continue the trials the continuation holds and park the tail for the next step (PPO
        steps with continuation on); warm-up cancels it, nothing being published between its steps.
        ``park_tail`` False (a checkpoint follows): the held trials are continued, the tail cancelled.
        """
        label = label or f"step-{index:04d}"
        self.runtime.begin_rollout(label)
        t0 = time.monotonic()
        continuation = self.continuation if carry else None
        # SIGTERM cancels it (t1.run.signals); the runner's loop outlives it, with the parked trials
        batch = run_interruptible(self._rollout(stream, label, continuation, park_tail), self.runner)
        requeued = self.runtime.end_rollout()
        rollout_s = time.monotonic() - t0
        samples = admitted_samples(batch, label, self.recipe, self.rundir, self.console)
        return InFlight.of(
            batch,
            samples,
            recipe=self.recipe,
            index=index,
            staleness=staleness,
            rollout_s=rollout_s,
            requeued=requeued,
        )

    def _collect_next(
        self, stream: StepTasks, index: int, *, planned: bool, staleness: int, park_tail: bool = True
    ) -> InFlight | None:
        """Roll out step ``index``'s batch during the training of step ``index - staleness``.

        A batch beyond the planned steps is rolled out only for the checkpoint after the last step (so that
        a run that ends at its plan can be extended exactly, ``--resume RUN_DIR ppo.steps=N``); when none of
        its trials finishes, the run still ends well, and that checkpoint goes without it.
        """
        try:
            return self._collect(stream, index, staleness=staleness, park_tail=park_tail)
        except RunFailed as exc:
            if planned:
                raise
            self.console.print(
                f"[yellow]warning:[/] the batch for the last checkpoint: {exc}", highlight=False
            )
            return None

    async def _rollout(
        self, stream: StepTasks, label: str, continuation: Continuation | None, park_tail: bool = True
    ) -> BatchResult:
        """Collect one oversampled batch; each trial's record is written as soon as it ends.

        A trial's record goes to ``trajectories/<the step it ended in>/``; after the batch, every record of
        it that has none there yet is written (cancelled before it started, carried in finished), and the
        trials parked for the next step are written as they stand (``parked``); a continued trial thus has a
        file in every step it ran in, the last one its whole trajectory.
        """
        from t1_rollout.engine import SamplingParams
        from t1_rollout.scheduler import SchedulerConfig, collect_batch

        r, rundir = self.recipe, self.rundir
        base = SamplingParams.from_spec(
            r.engine.sampling, max_new_tokens=r.rollout.max_new_tokens, seed=r.seed
        )
        scheduler = SchedulerConfig.from_spec(r.rollout, samples_per_task=r.ppo.samples_per_task)

        async def run_one(task: Task, record: TrialRecord) -> TrialRecord:
            record.steps.append(label)
            # Each trial samples with its own seed, fixed by the recipe seed, the step and its launch slot.
            sampling = dataclasses.replace(base, seed=trial_seed(r.seed, label, record.launch_index))
            try:
                rec = await self.runtime.run_trial(task, record, sampling, label)
            finally:
                rundir.write_trajectory(record.steps[-1], record.trial_id, record.to_json())
            self.stop.check()
            out.print_trial(self.console, record.steps[-1], rec)
            return rec

        for rec in continuation.records if continuation is not None else ():
            rec.steps.append(label)  # continued in this step: its record ends here or is carried again
        self.progress.trials(label, scheduler.launched)
        batch = await collect_batch(
            stream,
            run_one,
            scheduler,
            on_trial_done=self.progress.trial_done,
            continuation=continuation,
            park_tail=park_tail,
        )
        # cancelled before they started never reached run_one; the scheduler may add to a cancelled
        # trial's cause after the trial wrote its record; a parked one is written as it stands
        for _, rec in batch.outcomes():
            if (
                rec.status in ("parked", "cancelled")
                or not (rundir.root / "trajectories" / label / f"{rec.trial_id}.json").exists()
            ):
                rundir.write_trajectory(label, rec.trial_id, rec.to_json())
        return batch

    # ---- checkpoints, resume, evaluation

    def _checkpoint(self, summary: RunSummary, stream: StepTasks, held: list[InFlight]) -> None:
        """Save the whole run state after ``summary.steps`` PPO steps, the batches in flight as its buffer."""
        from t1.run.resume import save_state

        checkpoint = self.rundir.root / "checkpoints" / f"step-{summary.steps:04d}"
        metrics = self.rundir.metrics_path
        save_state(
            checkpoint,
            recipe=self.recipe,
            resolved=self.resolved,
            stream=stream,
            ppo_steps=summary.steps,
            warmup_steps=summary.warmup_steps,
            metrics_rows=len(metrics.read_text().splitlines()) if metrics.is_file() else 0,
            rollout_buffer=[record for batch in held for record in batch.to_records()],
            buffered_steps=[batch.index for batch in held],
            **self.runtime.checkpoint_parts(checkpoint),
        )

    def _resume(self, summary: RunSummary, stream: StepTasks) -> list[InFlight]:
        """Load ``resume_from`` into the started runtime and the stream, before any generation.

        Rows and trajectories the interrupted process wrote after the checkpoint move aside
        (`t1.run.resume.supersede_after`, which keeps the buffered batch's trajectories); the runtime loads
        the trainer's part and gives every engine the restored weights under the saved version.

        Returns:
            The batches of steps ``ppo_steps``, ``ppo_steps + 1``, ... from the rollout buffer (empty when
            synchronous).

        Raises:
            ResumeError: the checkpoint or its buffer is unusable (naming the file), or the buffered batches
                are not the next steps'.
        """
        from t1.run.resume import load_state, supersede_after

        state = load_state(self.resume_from)
        flights = buffered_batches(state, self.resume_from)
        supersede_after(self.rundir.root, state)
        self.runtime.restore(dataclasses.replace(state, rollout_buffer=[]), stream)
        summary.steps, summary.warmup_steps = state.ppo_steps, state.warmup_steps
        self.rundir.write_status("running", state.ppo_steps, None)
        held = ""
        if len(flights) == 1:
            held = f", with step {flights[0].index}'s batch from its rollout buffer"
        elif flights:
            held = f", with steps {flights[0].index} to {flights[-1].index}'s batches from its rollout buffer"
        self.console.print(
            f"resumed from {self.resume_from} after PPO step {state.ppo_steps} (weight version "
            f"{state.weight_version}{held})"
        )
        return flights

    def _evaluate(self, step: int, version: int) -> None:
        """Evaluate the suites on the weights just published (`t1.run.evaluation.evaluate_suites`)."""
        from t1.run.evaluation import evaluate_suites

        parts = self.runtime.evaluation_parts(version)
        evaluate_suites(
            self.recipe,
            parts,
            step,
            rundir=self.rundir,
            runner=self.runner,
            stop=self.stop,
            console=self.console,
        )

    # ---- the end

    def _close_loop(self, cause: str, *, quiet: bool = False) -> None:
        """Cancel and record the trials still parked (`release_parked`), then close the run's event loop.

        Whatever else the loop still holds (a trial whose cancellation a stop interrupted before it had
        reclaimed its sandbox) is cancelled and awaited too, with every signal absorbed, before the loop
        closes: ``asyncio.Runner.close`` would do the same, but a signal could cut it short. Once only.

        Args:
            cause: why the parked trials are cancelled.
            quiet: print an error of the recording instead of raising it (on a failed or interrupted run's
                way out, where it must not hide the run's own cause).
        """
        if self._loop_closed:
            return
        self._loop_closed = True
        try:
            self.release_parked(cause)
            run_shielded(_cancel_the_rest(), self.runner)
        except Exception as exc:
            if not quiet:
                raise
            self.console.print(f"[yellow]warning:[/] closing the event loop: {type(exc).__name__}: {exc}")
        finally:
            self.runner.close()

    def release_parked(self, cause: str) -> list[TrialRecord]:
        """Cancel the trials the continuation still holds, reclaim their sandboxes, and record them.

        Every stop signal is absorbed meanwhile (`t1.run.signals.run_shielded`). Each record is written to
        ``trajectories/<its last step>/`` (``cancelled``, or ``finished`` for a carried record never trained
        on, its cause saying so) and, when there were any, one ``{"phase": "continuation_end"}`` row goes
        to ``metrics.jsonl`` with their count and ids. A no-op without continuation or with nothing held.

        Args:
            cause: why they are cancelled (``"the run ended"``), appended to each record's cause.

        Returns:
            The records released.
        """
        if self.continuation is None or not len(self.continuation):
            return []
        records = run_shielded(self.continuation.cancel_all(cause), self.runner)
        if self.rundir is not None:
            for rec in records:
                self.rundir.write_trajectory(rec.steps[-1], rec.trial_id, rec.to_json())
            last = records[0].steps[-1] if records else None
            self.rundir.append_metrics(
                {
                    "phase": "continuation_end",
                    "step": int(last.rsplit("-", 1)[1]) if last else None,
                    "trials_released": len(records),
                    "trials_released_finished": sum(r.status == "finished" for r in records),
                    "trial_ids": [r.trial_id for r in records],
                    "cause": cause,
                }
            )
        self.console.print(
            f"continuation: {len(records)} parked trial(s) cancelled and reclaimed ({cause})", highlight=False
        )
        return records


async def _cancel_the_rest() -> None:
    """Cancel every other task of the running loop and wait until each has ended (its clean-up run)."""
    me = asyncio.current_task()
    others = [t for t in asyncio.all_tasks() if t is not me]
    for t in others:
        t.cancel()
    if others:
        await asyncio.gather(*others, return_exceptions=True)


def _reopen(checkpoint: Path, *, tensorboard: bool) -> RunDir:
    """The run directory that holds ``checkpoint`` (``<run>/checkpoints/step-NNNN``), marked resumed."""
    root = checkpoint.parent.parent
    board = None
    if tensorboard:
        from t1.run.tensorboard import TensorBoardLog

        board = TensorBoardLog(root / "tensorboard")
    return RunDir(root, board, resumed_from=str(checkpoint.relative_to(root)))


__all__ = ["Phase", "Run"]
