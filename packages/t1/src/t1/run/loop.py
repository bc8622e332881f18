"""The embedded training loop: rollout, reward, TITO samples, critic then actor, publish; once per step.

One step (T1 §2, Fig. 2): the scheduler launches ``rollout.launched`` trials on tasks taken in the pool's
per-epoch seeded order, admits the first ``rollout.admitted`` that finish and cancels the tail (§7.4); every
admitted trial is stitched into samples whose four streams stay aligned (§4.1); the trainer computes the
critic's pre-update values, GAE, updates the critic and then the actor with routing replay (§4.2, §4.5); the
new actor weights are published to the engine with generation quiesced, so its weight version advances by one
(Appendix 12). Critic warm-up (§4.5) runs the same step with the critic update only and no publication.

The embedded loop runs rollout and training one after the other on the same CPU, so every sample of step
``t`` was drawn by policy version ``t`` (staleness 0). The one-step asynchronous pipeline of the paper
(rollout of step ``t+1`` overlapping training of step ``t``) is the Ray loop's (`t1.run.ray.loop.RayRun`,
``runtime.kind: ray``, ``runtime.mode: async``).

Every rollout of a run, and its evaluations, run on one event loop (an ``asyncio.Runner`` the run holds), so
that trials can outlive a step: with ``rollout.continuation.enabled`` (partial-rollout continuation, T1 §10,
`t1_rollout.continuation`), a PPO step's straggler tail is parked at turn boundaries instead of cancelled,
its sandboxes and shells alive across the training and the publication, and continued first in the next
step under the new weights; its samples then lag by up to ``max_resumes`` versions, which `ppo_step` accepts
only by the recipe's allowance (`t1_trainer.step.continuation_lag`). Critic warm-up steps cancel their tail
(nothing is published between them). The trials still parked when the run ends, fails or is stopped are
cancelled with every signal absorbed (`t1.run.signals.run_shielded`) and recorded, their sandboxes reclaimed
before the run returns.
"""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rich.console import Console

from t1.run import console as out
from t1.run.build import Components, build
from t1.run.pools import tasks_per_step
from t1.run.preflight import preflight, refuse_unless_ok
from t1.run.run_dir import RunDir
from t1.run.signals import SIGNAL_NAMES, StopToken, deferred_signals, run_interruptible, run_shielded
from t1_spec import Recipe

Phase = Literal["critic_warmup", "ppo"]


@dataclass
class RunSummary:
    """What a finished run reports.

    Attributes:
        run_dir: the run directory.
        steps: PPO steps completed.
        warmup_steps: critic warm-up steps completed.
        wall_s: wall time per stage, seconds (``setup``, ``warmup``, ``rollout``, ``train``, ``publish``,
            ``total``).
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


class Run:
    """One training run of a recipe: preflight, build, critic warm-up, PPO steps, final weights.

    Args:
        recipe: the validated recipe.
        resolved: the resolved recipe as plain data (written into the run directory).
        console: where progress and the per-step table go.
        stop: the stop token the signal handlers set (`t1.run.signals.stop_signals`).
        resume_from: a checkpoint folder of an earlier run of this recipe (``<run>/checkpoints/step-NNNN``,
            `t1.run.resume.open_run`): the run continues in that run directory from that checkpoint's state.

    Raises:
        PreflightError: the recipe cannot run here (a backend not built, a setting the loop does not run, a
            host prerequisite missing, a plan the capacity model refuses), before any work; a
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
        self.progress = out.RunProgress(self.console)  # bars on a terminal only
        self.rundir: RunDir | None = None
        self.parts: Components | None = None
        self.runner = asyncio.Runner()  # the one event loop of every rollout (parked trials live on it)
        self._loop_closed = False
        self.continuation: Any = None  # t1_rollout.continuation.Continuation, with rollout.continuation on

    @property
    def run_dir(self) -> Path | None:
        """The run directory, once start-up has created it (None before)."""
        return self.rundir.root if self.rundir is not None else None

    def run(self) -> RunSummary:
        """Run critic warm-up (if enabled) and the PPO steps; write the run directory.

        ``status.json`` in the run directory says how the run ended: ``finished``, ``failed`` (with the error)
        or ``interrupted`` (with the signal), with the steps completed. The run directory is created after
        the components are built, so a recipe that fails to build leaves nothing behind.

        Returns:
            The `RunSummary`.

        Raises:
            RunFailed: a step had no finished trial to train on (no weights are written).
            ValueError: ``logging.run_root`` became unusable after the preflight checked it.
            KeyboardInterrupt: on Ctrl-C, SIGTERM or SIGHUP, after marking the run directory
                ``interrupted``; the sandboxes of the trials in flight are reclaimed first.
        """
        t_total = time.monotonic()
        self.parts = build(self.recipe)
        r = self.recipe
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
        summary.wall_s["setup"] = time.monotonic() - t_total
        # "running" until the end: a run killed outright (SIGKILL, power loss) still says it did not finish
        self.rundir.write_status("running", 0, None)
        try:
            with self.progress:
                self._run_steps(summary)
            self._close_loop("the run ended")
            self._stop_engine()
        except KeyboardInterrupt:
            self._close_loop("the run was interrupted", quiet=True)
            with deferred_signals():  # a second signal must not leave the status at "running"
                reason = self.stop.reason or SIGNAL_NAMES[signal.SIGINT]  # Python's handler records none
                self.rundir.write_status("interrupted", summary.steps, f"interrupted by {reason}")
                self._stop_engine()
            raise
        except BaseException as exc:
            self._close_loop("the run failed", quiet=True)
            with deferred_signals():
                self.rundir.write_status("failed", summary.steps, f"{type(exc).__name__}: {exc}")
                self._stop_engine()
            raise
        summary.wall_s["total"] = time.monotonic() - t_total
        with deferred_signals():
            self.rundir.write_status("finished", summary.steps, None)
        self.console.print(f"run finished in {summary.wall_s['total']:.1f} s -> {self.rundir.root}")
        return summary

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

    def release_parked(self, cause: str) -> list[Any]:
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

    def _stop_engine(self) -> None:
        """Stop the engine's worker thread before the process exits, on every exit path.

        The embedded engine decodes on a thread of its own; left running into interpreter shutdown, a forward
        it is inside aborts the process (``terminate called without an active exception``, exit -6 instead of
        130; after a finished run, the oversampling tail's cancelled requests can still be decoding). The
        cancelled trials' requests are dropped, so the thread ends after at most one decode step.
        """
        close = getattr(self.parts.engine, "close", None) if self.parts is not None else None
        if close is not None:
            close()

    def _run_steps(self, summary: RunSummary) -> None:
        from t1_rollout.continuation import Continuation, ContinuationConfig
        from t1_tasks import StepTasks
        from t1_trainer.weights import save_weights

        r, parts = self.recipe, self.parts
        steps = planned_steps(r, len(parts.pool))
        config = ContinuationConfig.from_spec(r.rollout)
        self.continuation = Continuation(config) if config is not None else None
        self.console.print(
            f"[bold]t1 train[/] {r.name}: {len(parts.pool)} tasks, {steps} step{'s' * (steps != 1)}, "
            f"{r.rollout.launched} launched / {r.rollout.admitted} admitted per step -> {self.rundir.root}"
        )
        for key in ("warmup", "rollout", "train", "publish"):
            summary.wall_s[key] = 0.0
        stream = StepTasks.from_spec(parts.pool, r.pool)
        start = 0
        if self.resume_from is not None:
            from t1.run.resume import load_state, restore, supersede_after

            state = load_state(self.resume_from)
            supersede_after(self.rundir.root, state)
            restore(state, backend=parts.backend, engine=parts.engine, stream=stream)
            start = summary.steps = state.ppo_steps
            summary.warmup_steps = state.warmup_steps
            self.rundir.write_status("running", start, None)
            self.console.print(f"resumed from {self.resume_from} after PPO step {start}")

        if r.critic_warmup.enabled and self.resume_from is None:  # a checkpoint follows the warm-up
            warm = warmup_steps(r, len(parts.warmup_pool))
            warm_stream = StepTasks.from_spec(parts.warmup_pool, parts.warmup_pool_spec)
            self.progress.phase("critic warm-up", warm)
            for w in range(warm):
                t0 = time.monotonic()
                row = self._step("critic_warmup", w, warm_stream)
                summary.wall_s["warmup"] += time.monotonic() - t0
                summary.warmup_steps += 1
                ev = out.fmt(row.get("critic/explained_variance"))
                self.console.print(f"critic warm-up {w + 1}/{warm}: EV {ev}")
                out.print_warnings(self.console, row)

        every = r.trainer.checkpoint_every
        self.progress.phase("PPO steps", steps - start)
        for step in range(start, steps):
            self.stop.check()
            row = self._step("ppo", step, stream)
            for key in ("rollout", "train", "publish"):
                summary.wall_s[key] += row["wall_s"][key]
            summary.steps += 1
            summary.last_metrics = row
            if every and summary.steps % every == 0:
                self._checkpoint(summary, stream)
            self.rundir.write_status("running", summary.steps, None)
            out.print_step(self.console, row, steps=steps, table=r.logging.print_table)
            if r.evaluation.enabled and summary.steps % r.evaluation.every_steps == 0:
                self._evaluate(step)

        self.release_parked("the run ended")
        self.stop.check()  # a stop asked while they were released: the run ends interrupted, not finished
        if r.trainer.save_final_weights:
            save_weights(parts.backend, self.rundir.root)

    def _checkpoint(self, summary: RunSummary, stream: Any) -> None:
        """Save the whole run state after ``summary.steps`` PPO steps (`t1.run.resume.save_state`)."""
        from t1.run.resume import save_state

        metrics = self.rundir.metrics_path
        save_state(
            self.rundir.root / "checkpoints" / f"step-{summary.steps:04d}",
            recipe=self.recipe,
            resolved=self.resolved,
            backend=self.parts.backend,
            engine=self.parts.engine,
            stream=stream,
            ppo_steps=summary.steps,
            warmup_steps=summary.warmup_steps,
            metrics_rows=len(metrics.read_text().splitlines()) if metrics.is_file() else 0,
        )

    def _evaluate(self, step: int) -> None:
        """Run the model policy on every ``evaluation.suites`` pool with the engine's current weights (T1 §6).

        One ``{"phase": "evaluation", "step": ..., "suite": ...}`` row per suite goes to ``metrics.jsonl``
        (the figures of `t1_rollout.eval_metrics.summarize`) and one line to the console. Evaluation samples
        with its own seeds (`t1_rollout.evaluate.ModelPolicy.attempt_seed`) and draws no training task, so
        the training's rows do not depend on it; its verifier files go to ``evaluation/step-NNNN/``.
        """
        from t1_rollout.evaluate import EvalSettings, ModelPolicy, evaluate_pool
        from t1_tasks import load_pool
        from t1_tito import TitoSession

        r, parts = self.recipe, self.parts
        settings = EvalSettings.from_recipe(r)
        tito = TitoSession(parts.tito.tokenizer, parts.tito.template, thinking=r.evaluation.thinking)
        for i, suite in enumerate(r.evaluation.suites):
            self.stop.check()
            policy = ModelPolicy(
                engine=parts.engine,
                tito=tito,
                settings=settings,
                sandbox_factory=parts.sandbox_factory,
                reward_spec=r.reward,
                seed=r.seed,
                label=f"eval-step-{step:04d}-{suite}",
            )
            report = run_interruptible(
                evaluate_pool(
                    load_pool(suite),
                    policy,
                    attempts=settings.attempts,
                    concurrency=settings.concurrency,
                    total_timeout_s=settings.total_timeout_s,
                    work_dir=self.rundir.root / "evaluation" / f"step-{step:04d}" / f"suite-{i}",
                ),
                self.runner,
            )
            row = {
                "phase": "evaluation",
                "step": step,
                "suite": suite,
                "weight_version": parts.engine.weight_version,
                **report.summary(),
                "wall_s": report.wall_s,
            }
            self.rundir.append_metrics(row)
            k = settings.attempts
            self.console.print(
                f"[bold]evaluation[/] after step {step + 1} on {suite}: resolved "
                f"{out.fmt(row['resolved_rate'])}, reward {out.fmt(row['mean_reward'])}, pass@{k} "
                f"{out.fmt(row['pass_at_k'][k])} over {row['trials']} trials ({row['failed']} failed) in "
                f"{report.wall_s:.1f} s",
                highlight=False,
            )
            out.print_warnings(self.console, row)

    def _step(self, phase: Phase, index: int, stream: Any) -> dict[str, Any]:
        """One step of ``phase``: roll out a batch, update (critic only in warm-up), publish after PPO.

        Returns:
            The step's metrics row, already appended to ``metrics.jsonl``.
        """
        from t1_trainer.publish import publish_weights
        from t1_trainer.step import continuation_lag, critic_warmup_step, ppo_step

        r, parts = self.recipe, self.parts
        label = f"warmup-{index:04d}" if phase == "critic_warmup" else f"step-{index:04d}"
        t_step = time.monotonic()
        carry = self.continuation if phase == "ppo" else None  # warm-up cancels its tail: nothing publishes
        batch, samples = self._collect(stream, label, carry)
        t_rollout = time.monotonic() - t_step

        self.stop.check()
        t0 = time.monotonic()
        if phase == "critic_warmup":
            train_metrics = critic_warmup_step(parts.backend, samples, r.ppo)
        else:
            lag = continuation_lag(r.rollout)
            train_metrics = ppo_step(parts.backend, samples, r.ppo, continuation_lag=lag)
        t_train = time.monotonic() - t0

        row: dict[str, Any] = {"phase": phase, "step": index, "epochs": sorted(set(batch.epochs))}
        wall = {"rollout": t_rollout, "train": t_train}
        if phase == "ppo":
            wall["publish"] = publish_weights(parts.backend, [parts.engine])
            row["weight_version_after"] = parts.engine.weight_version
        row.update(batch.metrics(compaction_max_failure_rate=r.rollout.compaction_max_failure_rate))
        row["batch_shortfall"] = r.rollout.admitted - len(batch.admitted)
        row.update(_plain(train_metrics))
        row["wall_s"] = {**wall, "step": time.monotonic() - t_step}
        self.rundir.append_metrics(row)
        self.progress.step_done()
        return row

    async def _rollout(self, stream: Any, label: str, continuation: Any = None) -> Any:
        """Collect one oversampled batch; each trial's record is written as soon as it ends.

        A trial's record goes to ``trajectories/<the step it ended in>/``; after the batch, every record of
        it that has none there yet is written (cancelled before it started, carried in finished), and the
        trials parked for the next step are written as they stand (``parked``); a continued trial thus has a
        file in every step it ran in, the last one its whole trajectory.
        """
        from t1_rollout.scheduler import collect_batch
        from t1_rollout.trial import TrialRecord, run_trial

        parts = self.parts

        async def run_one(task: Any, record: TrialRecord) -> TrialRecord:
            record.steps.append(label)
            # Each trial samples with its own seed, fixed by the recipe seed, the step and its launch slot.
            sampling = dataclasses.replace(
                parts.sampling, seed=trial_seed(self.recipe.seed, label, record.launch_index)
            )
            try:
                rec = await run_trial(
                    task,
                    sandbox_factory=parts.sandbox_factory,
                    engine=parts.engine,
                    tito=parts.tito,
                    sampling=sampling,
                    harness=parts.harness,
                    limits=parts.limits,
                    reward_spec=self.recipe.reward,
                    out_dir=self.rundir.verifier_dir,
                    record=record,
                    validated=parts.validated.get(task.id),
                )
            finally:
                self.rundir.write_trajectory(record.steps[-1], record.trial_id, record.to_json())
            self.stop.check()
            out.print_trial(self.console, record.steps[-1], rec)
            return rec

        for rec in continuation.records if continuation is not None else ():
            rec.steps.append(label)  # continued in this step: its record ends here or is carried again
        self.progress.trials(label, parts.scheduler.launched)
        batch = await collect_batch(
            stream,
            run_one,
            parts.scheduler,
            on_trial_done=self.progress.trial_done,
            continuation=continuation,
        )
        # cancelled before they started never reached run_one; the scheduler may add to a cancelled
        # trial's cause after the trial wrote its record; a parked one is written as it stands
        for _, rec in batch.outcomes():
            if (
                rec.status in ("parked", "cancelled")
                or not (self.rundir.root / "trajectories" / label / f"{rec.trial_id}.json").exists()
            ):
                self.rundir.write_trajectory(label, rec.trial_id, rec.to_json())
        return batch

    def _collect(self, stream: Any, label: str, continuation: Any = None) -> tuple[Any, list[Any]]:
        """Roll out one batch; refuse to go on when nothing finished, and say when the batch is short."""
        # SIGTERM cancels it (t1.run.signals); the runner's loop outlives it, with the parked trials
        batch = run_interruptible(self._rollout(stream, label, continuation), self.runner)
        return batch, admitted_samples(batch, label, self.recipe, self.rundir, self.console)


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


def admitted_samples(batch: Any, label: str, recipe: Recipe, rundir: RunDir, console: Console) -> list[Any]:
    """The TITO samples of a batch's admitted trials; a batch with none stops the run, a short one is said.

    Shared by the embedded loop and the Ray loop, so both refuse and warn alike.

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


def _plain(metrics: Any) -> dict[str, Any]:
    """Turn a metrics object (dict or dataclass) into a flat dict of JSON-ready values."""
    if hasattr(metrics, "as_dict"):
        metrics = metrics.as_dict()
    elif dataclasses.is_dataclass(metrics):
        metrics = dataclasses.asdict(metrics)
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in dict(metrics).items()}


__all__ = [
    "Run",
    "RunFailed",
    "RunSummary",
    "admitted_samples",
    "planned_steps",
    "trial_seed",
    "warmup_steps",
]
