"""The embedded training loop: rollout, reward, TITO samples, critic then actor, publish; once per step.

One step (T1 §2, Fig. 2): the scheduler launches ``rollout.launched`` trials on tasks taken in the pool's
per-epoch
seeded order, admits the first ``rollout.admitted`` that finish and cancels the tail (§7.4); every admitted
trial is
stitched into samples whose four streams stay aligned (§4.1); the trainer computes the critic's pre-update
values, GAE,
updates the critic and then the actor with routing replay (§4.2, §4.5); the new actor weights are published
to the
engine with generation quiesced, so its weight version advances by one (Appendix 12).

The embedded loop runs rollout and training one after the other on the same CPU, so every sample of step
``t`` was
drawn by policy version ``t`` (staleness 0). The one-step asynchronous pipeline of the paper (rollout of step
``t+1``
overlapping training of step ``t`` on disjoint devices) is not built yet.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import statistics
import sys
import time
import zlib
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from t1._errors import run_interruptible
from t1.run_dir import RunDir
from t1_rollout.engine.base import SamplingParams
from t1_rollout.harness import HarnessConfig
from t1_rollout.scheduler import BatchResult, SchedulerConfig, collect_batch
from t1_rollout.trial import TrialLimits, TrialRecord, run_trial
from t1_spec import Recipe
from t1_tasks import Pool, Task


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


def task_stream(pool: Pool, seed: int) -> Iterator[tuple[int, Task]]:
    """Tasks in per-epoch seeded order, epoch after epoch (T1 §3: mandatory for a pool stored in rank order).

    Yields:
        ``(epoch, task)`` pairs, forever.
    """
    epoch = 0
    while True:
        for task in pool.epoch_order(epoch, seed):
            yield epoch, task
        epoch += 1


class StepTasks:
    """Draws each step's launched tasks from :func:`task_stream`, never the same task twice in one step.

    A step that spans an epoch boundary could meet a task it already holds (the next epoch's order is a new
    permutation); that draw is deferred, in order, to the next step instead of dropped, so every epoch still
    runs every task once (T1: one sample per task per step).

    Args:
        pool: the pool to draw from.
        seed: the per-epoch shuffle seed.

    Raises:
        ValueError: from :meth:`draw`, when a step asks for more tasks than the pool holds.
    """

    def __init__(self, pool: Pool, seed: int) -> None:
        self._size = len(pool)
        self._stream = task_stream(pool, seed)
        self._deferred: deque[tuple[int, Task]] = deque()

    def draw(self, n: int) -> list[tuple[int, Task]]:
        """The next ``n`` distinct ``(epoch, task)`` pairs, deferred draws first."""
        if n > self._size:
            raise ValueError(f"a step of {n} distinct tasks cannot be drawn from a pool of {self._size}")
        chosen: list[tuple[int, Task]] = []
        held: set[str] = set()
        skipped: list[tuple[int, Task]] = []
        # Terminates: the pool has more tasks than the step holds, and each epoch's order holds every task.
        while len(chosen) < n:
            item = self._deferred.popleft() if self._deferred else next(self._stream)
            if item[1].id in held:
                skipped.append(item)
                continue
            chosen.append(item)
            held.add(item[1].id)
        self._deferred.extendleft(reversed(skipped))
        return chosen


def trial_payload(record: TrialRecord) -> dict[str, Any]:
    """A trial's record as JSON-ready data for ``trajectories/``."""
    episode = record.episode
    turns = episode.turns if episode else []
    audit = record.stitch.audit if record.stitch else None
    return {
        "trial_id": record.trial_id,
        "task_id": record.task_id,
        "family": record.family,
        "status": record.status,
        "cause": record.cause,
        "finish": episode.finish if episode else None,
        "parse_failures": episode.parse_failures if episode else 0,
        "turns": len(turns),
        "prompt_tokens": [len(t.prompt_ids) for t in turns],
        "completion_tokens": [len(t.output_ids) for t in turns],
        "policy_versions": sorted({t.policy_version for t in turns}),
        "messages": episode.messages if episode else [],
        "reward": None if record.reward is None else record.reward.value,
        # no per-assertion report (a fallback): the counts are unknown, not 0
        "assertions_passed": None if not record.reward or not record.reward.total else record.reward.passed,
        "assertions_total": None if not record.reward or not record.reward.total else record.reward.total,
        "fallback": None if record.reward is None else record.reward.fallback,
        "outcomes": [
            {"name": o.name, "status": o.status, "message": o.message}
            for o in (record.report.outcomes if record.report else ())
        ],
        "verifier": None
        if record.verifier is None
        else {
            "exit_code": record.verifier.exit_code,
            "timed_out": record.verifier.timed_out,
            "error": record.verifier.error,
            "dir": str(record.verifier.out_dir),
        },
        "samples": [
            {"chunk": s.chunk_index, "tokens": int(len(s.token_ids)), "loss_tokens": int(s.loss_mask.sum())}
            for s in record.samples
        ],
        "tito": None
        if audit is None
        else {"loss_tokens": audit.loss_tokens, "drifted": audit.drifted_loss_tokens, "splits": audit.splits},
        "timings_s": record.timings,
    }


def rollout_metrics(batch: BatchResult) -> dict[str, Any]:
    """Per-step rollout metrics of issue 2 part 10, from the admitted batch and its failures.

    Reward and assertion figures are over admitted trials only (those trained on); failures are counted by
    cause
    stage and never enter the reward mean.
    """
    admitted = batch.admitted
    rewards = [r.reward.value for r in admitted if r.reward and r.reward.value is not None]
    passed = [r.reward.passed for r in admitted if r.reward and r.reward.total]
    total = [r.reward.total for r in admitted if r.reward and r.reward.total]
    fallbacks = Counter(str(r.reward.fallback) for r in admitted if r.reward and r.reward.fallback)
    episodes = [r.episode for r in admitted if r.episode]
    n_turns = [len(e.turns) for e in episodes]
    parse_fail = sum(e.parse_failures for e in episodes)
    samples = [s for r in admitted for s in r.samples]
    audits = [r.stitch.audit for r in admitted if r.stitch]
    loss_tokens = sum(a.loss_tokens for a in audits)
    drifted = sum(a.drifted_loss_tokens for a in audits)
    failure_stages = Counter((r.cause or "unknown").split(":", 1)[0] for r in batch.failed)
    return {
        "reward_mean": statistics.fmean(rewards) if rewards else None,
        "assertions_passed_mean": statistics.fmean(passed) if passed else None,
        "assertions_total_mean": statistics.fmean(total) if total else None,
        "fallbacks": dict(fallbacks),
        # verifier reports that listed an assertion more than once (folded to one, never counted twice)
        "report_duplicates": sum(getattr(r.reward, "duplicates", 0) for r in admitted if r.reward),
        "parse_failure_rate": parse_fail / sum(n_turns) if sum(n_turns) else None,
        "turns_mean": statistics.fmean(n_turns) if n_turns else None,
        "tokens_mean": statistics.fmean(len(s.token_ids) for s in samples) if samples else None,
        "loss_tokens": int(sum(int(s.loss_mask.sum()) for s in samples)),
        "tito_drift_loss_region": drifted / loss_tokens if loss_tokens else None,
        "tito_drifted_tokens": drifted,
        "chunks_split": sum(a.splits for a in audits),
        "samples": len(samples),
        "trials_launched": batch.launched,
        "trials_admitted": len(admitted),
        "trials_finished": len(admitted) + len(batch.finished_late),
        "trials_failed": len(batch.failed),
        "trials_cancelled": len(batch.cancelled),
        "failures_by_stage": dict(failure_stages),
        "retention_by_family": batch.retention_by_family(),
        "policy_versions": [s.policy_version for s in samples],
        "finish_reasons": dict(Counter(e.finish for e in episodes)),
    }


class RunFailed(RuntimeError):
    """A run stopped because a step had nothing to train on; the run directory says why (``status.json``)."""


class HostNotReady(RuntimeError):
    """This machine lacks a prerequisite of the recipe (bubblewrap, a CUDA device); raised before any work."""


class Trainer:
    """Wires the packages together for one recipe and runs it.

    Args:
        recipe: the validated recipe (embedded engine, local sandbox, torch backend).
        resolved: the resolved recipe as plain data (written into the run directory).
        console: where progress and the per-step table go.

    Raises:
        NotImplementedError: listing every part of the recipe the embedded loop does not run yet (SGLang,
            Daytona, Docker, Harbor and Megatron backends, TITO repair cases other than strict, group
            sampling), before anything starts.
        HostNotReady: bubblewrap is missing, or a ``cuda`` device is asked for where torch sees none.
    """

    def __init__(self, recipe: Recipe, resolved: dict[str, Any], console: Console | None = None) -> None:
        self.recipe = recipe
        self.resolved = resolved
        self.rundir: RunDir | None = None
        self.interrupted_by = "Ctrl-C (SIGINT)"
        self.stop_requested = False
        """Set by a signal handler; checked after every trial and step, so a stop is never lost even where the
        handler's own KeyboardInterrupt was (one raised inside a fork hook is swallowed)."""
        """What ``status.json`` names on an interrupt; the CLI sets ``"SIGTERM"`` on that signal."""
        # Logs piped to a file keep a wide table instead of rich's 80-column fallback.
        self.console = console or (Console() if sys.stdout.isatty() else Console(width=160))
        missing = unbuilt_parts(recipe)
        if missing:
            raise NotImplementedError(
                "the embedded training loop cannot run this recipe yet:\n  - " + "\n  - ".join(missing)
            )
        lacking = host_problems(recipe)
        if lacking:
            raise HostNotReady("this machine cannot run the recipe:\n  - " + "\n  - ".join(lacking))

    def _build(self) -> None:
        """Load pools, tokenizer, engine and trainer backend, then create the run directory.

        The run directory is created last, so a recipe that fails here (an empty pool, a bad path) leaves
        nothing behind.
        """
        # Heavy imports stay here so `t1 --help` and recipe verbs start fast.
        import torch

        from t1_rollout.engine.embedded import EmbeddedEngine
        from t1_rollout.model import build_model
        from t1_rollout.sandbox.local import LocalSandbox
        from t1_tasks import load_pool
        from t1_tito import ChatTemplate, TitoSession, load_tokenizer
        from t1_trainer.torch_backend import TorchBackend

        r = self.recipe
        self.pool = load_pool(r.pool.source, limit=r.pool.limit)
        warm = r.critic_warmup.pool or r.pool
        self.warmup_pool = self.pool if warm == r.pool else load_pool(warm.source, limit=warm.limit)
        self.warmup_seed = warm.shuffle_seed
        for name, pool, spec in (("pool", self.pool, r.pool), ("critic_warmup.pool", self.warmup_pool, warm)):
            if r.rollout.launched > len(pool):
                limited = f" (cut to {spec.limit} by {name}.limit)" if spec.limit is not None else ""
                raise ValueError(
                    f"rollout.launched={r.rollout.launched} exceeds the {len(pool)} tasks of {name} "
                    f"{pool.source!r}{limited}: one step would run a task more than once (T1: one sample "
                    "per task per step); lower rollout.launched (and rollout.admitted, ppo.batch_size) "
                    "or use more tasks"
                )
        self.tito = TitoSession(load_tokenizer(r.model.tokenizer), ChatTemplate())
        model = build_model(r.model, seed=r.seed, dtype=getattr(torch, r.model.dtype))
        self.engine = EmbeddedEngine(model, weight_version=0, device=r.engine.device, seed=r.seed)
        self.backend = TorchBackend(
            model_spec=r.model,
            ppo_spec=r.ppo,
            seed=r.seed,
            device=r.trainer.device,
            actor=copy.deepcopy(model),
            temperature=r.engine.sampling.temperature,
            # also score with live routing, so each step shows what R3 removes (T1 §4.4: 0.021 -> 0.013)
            gap_without_replay=True,
        )
        self.sandbox_factory: Callable[[], Any] = lambda: LocalSandbox.from_spec(r.sandbox)
        ro = r.rollout
        s = r.engine.sampling
        self.sampling = SamplingParams(
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k,
            max_new_tokens=ro.max_new_tokens,
            seed=r.seed,
        )
        self.harness = HarnessConfig(
            max_turns=ro.max_turns,
            agent_deadline_s=ro.agent_deadline_s,
            max_new_tokens=ro.max_new_tokens,
            context_tokens=ro.context_tokens,
            observation_max_bytes=ro.observation_max_bytes,
        )
        self.limits = TrialLimits(
            remote_deadline_s=ro.remote_deadline_s,
            agent_deadline_s=ro.agent_deadline_s,
            verifier_deadline_s=ro.verifier_deadline_s,
        )
        self.scheduler = SchedulerConfig(
            admitted=ro.admitted,
            concurrency=ro.concurrency,
            creation_rate_per_s=ro.creation_rate_per_s,
            creation_quota_per_min=ro.creation_quota_per_min,
        )
        try:
            self.rundir = RunDir.create(Path(r.logging.run_root), r.name, self.resolved)
        except OSError as exc:
            raise ValueError(
                f"logging.run_root={r.logging.run_root!r}: cannot create the run directory there ({exc})"
            ) from None

    def _check_stop(self) -> None:
        if self.stop_requested:
            raise KeyboardInterrupt

    @property
    def run_dir(self) -> Path | None:
        """The run directory, once start-up has created it (None before)."""
        return self.rundir.root if self.rundir is not None else None

    def planned_steps(self) -> int:
        """PPO steps: ``ppo.steps``, or what ``ppo.epochs`` passes over the pool take, whichever is fewer.

        A pass counts the tasks drawn, ``rollout.launched`` per step: a cancelled trial used up its task's
        turn in the epoch (the oversampling tail is lost signal, T1 §10), as in the task stream itself. Only
        whole steps that fit in ``epochs`` passes run (floor), so no step reaches into a pass beyond them; the
        tasks left over at the end are not drawn.
        """
        r = self.recipe
        by_epochs = len(self.pool) * r.ppo.epochs // r.rollout.launched
        return by_epochs if r.ppo.steps is None else min(r.ppo.steps, by_epochs)

    async def _rollout(self, tasks: list[Task], label: str) -> BatchResult:
        """Collect one oversampled batch; each trial's record is written as soon as it ends."""

        async def run_one(task: Task, record: TrialRecord) -> TrialRecord:
            # Each trial samples with its own seed, fixed by the recipe seed, the step and its launch slot.
            sampling = dataclasses.replace(
                self.sampling, seed=trial_seed(self.recipe.seed, label, record.launch_index)
            )
            try:
                rec = await run_trial(
                    task,
                    sandbox_factory=self.sandbox_factory,
                    engine=self.engine,
                    tito=self.tito,
                    sampling=sampling,
                    harness=self.harness,
                    limits=self.limits,
                    reward_spec=self.recipe.reward,
                    out_dir=self.rundir.verifier_dir,
                    record=record,
                )
            finally:
                self.rundir.write_trajectory(label, record.trial_id, trial_payload(record))
            self._check_stop()
            scored = rec.status == "finished" and rec.reward is not None and rec.reward.value is not None
            reward = f"{rec.reward.value:.3f}" if scored else "-"
            turns = len(rec.episode.turns) if rec.episode else 0
            self.console.print(
                f"  [dim]{label}[/] {rec.trial_id:<36} {rec.status:<9} reward {reward:>6} turns {turns}"
                + (f"  [red]{escape(rec.cause or '')}[/]" if rec.status == "failed" else ""),
                highlight=False,
                soft_wrap=True,
            )
            return rec

        batch = await collect_batch(tasks, run_one, self.scheduler)
        for rec in batch.cancelled:  # cancelled before they started never reached run_one
            if not (self.rundir.root / "trajectories" / label / f"{rec.trial_id}.json").exists():
                self.rundir.write_trajectory(label, rec.trial_id, trial_payload(rec))
        return batch

    def _collect(self, tasks: list[Task], label: str) -> tuple[BatchResult, list[Any]]:
        """Roll out one batch; refuse to go on when nothing finished, and say when the batch is short."""
        batch = run_interruptible(self._rollout(tasks, label))  # SIGTERM cancels it (t1._errors)
        samples = [s for rec in batch.admitted for s in rec.samples]
        wanted = self.recipe.rollout.admitted
        if not samples:
            causes = Counter(rec.cause for rec in batch.failed)
            top = "; ".join(f"{n} x {cause}" for cause, n in causes.most_common(3)) or "no trial finished"
            raise RunFailed(
                f"{label}: no trial finished, nothing to train on ({len(batch.failed)} failed: {top}). "
                f"Every trial's cause is in {self.rundir.root / 'trajectories' / label}"
            )
        if len(batch.admitted) < wanted:
            self.console.print(
                f"[yellow]warning:[/] {label}: short batch, {len(batch.admitted)} of {wanted} admitted "
                f"({len(batch.failed)} failed); training on what finished",
                highlight=False,
            )
        return batch, samples

    def run(self) -> RunSummary:
        """Run critic warm-up (if enabled) and the PPO steps; write the run directory.

        ``status.json`` in the run directory says how the run ended: ``finished``, ``failed`` (with the error)
        or ``interrupted`` (Ctrl-C), with the steps completed.

        Returns:
            The :class:`RunSummary`.

        Raises:
            RunFailed: a step had no finished trial to train on (no weights are written).
            KeyboardInterrupt: on Ctrl-C, after marking the run directory ``interrupted``; the sandboxes of
                the trials in flight are reclaimed first.
        """
        t_total = time.monotonic()
        self._build()
        summary = RunSummary(run_dir=self.rundir.root)
        summary.wall_s["setup"] = time.monotonic() - t_total
        # "running" until the end: a run killed outright (SIGKILL, power loss) still says it did not finish
        self.rundir.write_status("running", 0, None)
        try:
            self._run_steps(summary)
        except KeyboardInterrupt:
            self.rundir.write_status("interrupted", summary.steps, f"interrupted by {self.interrupted_by}")
            raise
        except BaseException as exc:
            self.rundir.write_status("failed", summary.steps, f"{type(exc).__name__}: {exc}")
            raise
        summary.wall_s["total"] = time.monotonic() - t_total
        self.rundir.write_status("finished", summary.steps, None)
        self.console.print(f"run finished in {summary.wall_s['total']:.1f} s -> {self.rundir.root}")
        return summary

    def _run_steps(self, summary: RunSummary) -> None:
        from t1_trainer.step import critic_warmup_step, ppo_step
        from t1_trainer.weights import save_weights

        r = self.recipe
        steps = self.planned_steps()
        self.console.print(
            f"[bold]t1 train[/] {r.name}: {len(self.pool)} tasks, {steps} steps, "
            f"{r.rollout.launched} launched / {r.rollout.admitted} admitted per step -> {self.rundir.root}"
        )
        for key in ("warmup", "rollout", "train", "publish"):
            summary.wall_s[key] = 0.0

        if r.critic_warmup.enabled:
            # One epoch = enough launched trials to cover the warm-up pool once (T1 §4.5).
            warm_steps = -(-len(self.warmup_pool) * r.critic_warmup.epochs // r.rollout.launched)
            warm_stream = StepTasks(self.warmup_pool, self.warmup_seed)
            for w in range(warm_steps):
                t0 = time.monotonic()
                tasks = [task for _, task in warm_stream.draw(r.rollout.launched)]
                batch, samples = self._collect(tasks, f"warmup-{w:04d}")
                train_metrics = critic_warmup_step(self.backend, samples, r.ppo)
                row = {"phase": "critic_warmup", "step": w, **rollout_metrics(batch), **_plain(train_metrics)}
                row["batch_shortfall"] = r.rollout.admitted - len(batch.admitted)
                row["wall_s"] = {"rollout": batch.wall_s, "total": time.monotonic() - t0}
                summary.wall_s["warmup"] += time.monotonic() - t0
                self.rundir.append_metrics(row)
                summary.warmup_steps += 1
                ev = _fmt(row.get("critic/explained_variance"))
                self.console.print(f"critic warm-up {w + 1}/{warm_steps}: EV {ev}")

        stream = StepTasks(self.pool, r.pool.shuffle_seed)
        for step in range(steps):
            self._check_stop()
            t_step = time.monotonic()
            drawn = stream.draw(r.rollout.launched)
            tasks = [task for _, task in drawn]
            epochs = {epoch for epoch, _ in drawn}
            t0 = time.monotonic()
            batch, samples = self._collect(tasks, f"step-{step:04d}")
            t_rollout = time.monotonic() - t0

            self._check_stop()
            t0 = time.monotonic()
            train_metrics = ppo_step(self.backend, samples, r.ppo)
            t_train = time.monotonic() - t0

            t0 = time.monotonic()
            self.engine.pause()  # quiesce generation: no request spans two weight versions (T1 §7)
            try:
                self.engine.update_weights(
                    self.backend.export_weights(), weight_version=self.engine.weight_version + 1
                )
            finally:
                self.engine.resume()
            t_publish = time.monotonic() - t0

            row = {
                "phase": "ppo",
                "step": step,
                "epochs": sorted(epochs),
                "weight_version_after": self.engine.weight_version,
                **rollout_metrics(batch),
                "batch_shortfall": r.rollout.admitted - len(batch.admitted),
                **_plain(train_metrics),
                "wall_s": {
                    "rollout": t_rollout,
                    "train": t_train,
                    "publish": t_publish,
                    "step": time.monotonic() - t_step,
                },
            }
            self.rundir.append_metrics(row)
            summary.wall_s["rollout"] += t_rollout
            summary.wall_s["train"] += t_train
            summary.wall_s["publish"] += t_publish
            summary.steps += 1
            summary.last_metrics = row
            self.rundir.write_status("running", summary.steps, None)
            if r.logging.print_table:
                table = _metrics_table()
                _add_row(table, row)
                self.console.print(table)
            self.console.print(f"[bold]step {step + 1}/{steps}[/] done in {row['wall_s']['step']:.1f} s")

        save_weights(self.backend, self.rundir.root)


def unbuilt_parts(recipe: Recipe) -> list[str]:
    """Every setting of ``recipe`` the embedded loop does not run yet, as one line each (empty: runnable)."""
    missing = []
    for section, kind, supported in (
        ("engine.kind", recipe.engine.kind, "embedded"),
        ("sandbox.kind", recipe.sandbox.kind, "local"),
        ("trainer.backend", recipe.trainer.backend, "torch"),
    ):
        if kind != supported:
            missing.append(f"{section} '{kind}': not built into the embedded loop yet (use '{supported}')")
    if recipe.tito.repair != "strict":
        missing.append(
            f"tito.repair '{recipe.tito.repair}': not built yet; t1_tito stitches the strict case and splits "
            "every other boundary into a new chunk (use 'strict')"
        )
    if recipe.model.init != "random":
        missing.append(
            f"model.init '{recipe.model.init}': loading a checkpoint is not built yet (use 'random')"
        )
    if recipe.evaluation.enabled:
        missing.append("evaluation.enabled: periodic held-out evaluation is not built yet (set it to false)")
    if recipe.logging.tensorboard:
        missing.append(
            "logging.tensorboard: not built yet; metrics.jsonl holds every metric (set it to false)"
        )
    if recipe.pool.category_mix:
        missing.append(
            "pool.category_mix: re-weighting the pool by category is not built yet (set it to null)"
        )
    if recipe.trainer.checkpoint_every:
        missing.append(
            f"trainer.checkpoint_every {recipe.trainer.checkpoint_every}: periodic checkpoints are not built "
            "yet; the final weights are written at the end (set it to 0)"
        )
    if recipe.ppo.normalize_advantages:
        missing.append(
            "ppo.normalize_advantages: advantage whitening is not built; T1 §5.2 keeps advantages "
            "unnormalized (set it to false)"
        )
    for name in ("kl_coef", "load_balancing_coef"):
        if getattr(recipe.ppo, name):
            missing.append(
                f"ppo.{name} {getattr(recipe.ppo, name)}: the torch trainer builds no "
                f"{'KL' if name == 'kl_coef' else 'load-balancing'} loss; T1 runs with it at 0 (set it to 0)"
            )
    if recipe.ppo.samples_per_task != 1:
        missing.append(
            f"ppo.samples_per_task {recipe.ppo.samples_per_task}: group sampling (GRPO groups) is not built "
            "into the embedded loop yet; the paper's PPO uses one sample per task (T1 §5.2)"
        )
    return missing


def host_problems(recipe: Recipe) -> list[str]:
    """What this machine lacks to run ``recipe``, as one line each (empty: ready).

    Checks the local sandbox's prerequisites (bubblewrap, root) and, for a ``cuda`` device, that torch sees
    one; run before the model is built, so a missing prerequisite costs no start-up time and leaves no run
    directory.
    """
    problems = []
    if recipe.sandbox.kind == "local":
        from t1_rollout.sandbox import local_sandbox_problems

        problems += [f"sandbox.kind 'local': {line}" for line in local_sandbox_problems()]
    for name, device in (
        ("engine.device", getattr(recipe.engine, "device", "cpu")),
        ("trainer.device", recipe.trainer.device),
    ):
        if device.startswith("cuda"):
            import torch

            index = int(device.partition(":")[2] or 0)
            if not torch.cuda.is_available() or index >= torch.cuda.device_count():
                problems.append(
                    f"{name} {device!r}: torch sees {torch.cuda.device_count()} CUDA device(s) here; "
                    "use 'cpu' or a visible device"
                )
    return problems


def trial_seed(seed: int, label: str, launch_index: int) -> int:
    """A sampling seed for one trial, stable across runs: a hash of the recipe seed, the step and the slot."""
    return zlib.crc32(f"{seed}:{label}:{launch_index}".encode()) & 0x7FFFFFFF


def _plain(metrics: Any) -> dict[str, Any]:
    """Turn a metrics object (dict or dataclass) into a flat dict of JSON-ready values."""
    if hasattr(metrics, "as_dict"):
        metrics = metrics.as_dict()
    elif hasattr(metrics, "__dataclass_fields__"):
        from dataclasses import asdict

        metrics = asdict(metrics)
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in dict(metrics).items()}


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _sci(value: Any) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.1e}"


def _metrics_table() -> Table:
    table = Table(title=None, show_edge=False, pad_edge=False)
    for col in (
        "step",
        "reward",
        "passed",
        "turns",
        "tokens",
        "parse fail",
        "EV",
        "|dlogp| R3",
        "drift",
        "trials l/f/x/c",
    ):
        table.add_column(col, justify="right")
    return table


def _add_row(table: Table, row: dict[str, Any]) -> None:
    table.add_row(
        str(row["step"]),
        _fmt(row.get("reward_mean")),
        _fmt(row.get("assertions_passed_mean")),
        _fmt(row.get("turns_mean")),
        _fmt(row.get("tokens_mean")),
        _fmt(row.get("parse_failure_rate")),
        _fmt(row.get("critic/explained_variance")),
        _sci(row.get("actor/logprob_gap_replay")),
        _fmt(row.get("tito_drift_loss_region")),
        f"{row['trials_launched']}/{row['trials_finished']}/{row['trials_failed']}/{row['trials_cancelled']}",
    )
