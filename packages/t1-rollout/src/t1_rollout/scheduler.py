"""Admission control and oversampling for one rollout batch (T1 §7.4).

The scheduler draws tasks for a batch that needs ``admitted`` trials, launches ``samples_per_task`` trials per
task (1 in the paper, T1 §5.2; a group of G for the GRPO ablation, T1 §9), admits the first finished ones,
and cancels the straggler tail once the batch is full (560 launched for 512 admitted in production). With
groups, admission is by whole group: a group closes when its slowest member ends, so GRPO waits on the
slowest member of every admitted group (the cost T1 §9 names), and oversampling admits the first
``admitted / samples_per_task`` complete groups. Sandbox creation is paced by a token bucket (6 per second)
under a provider quota (600 per minute), and at most ``concurrency`` trials run at once (the per-node cap).
Cancelled trials reclaim their sandboxes before the batch is returned.

The cancelled tail is not a uniform sample: it concentrates the slowest task families and the longest
trajectories (T1 §10). :class:`BatchResult` therefore reports retention by family, and by trajectory length
(turns and sampled tokens, the length a cancelled trial had reached) and reward (`t1_rollout.retention`), so
the selection bias is visible in the run's metrics (`BatchResult.metrics`).

With a `t1_rollout.continuation.Continuation` (``rollout.continuation.enabled``, off by default as in the
paper), the tail is parked at turn boundaries instead of cancelled and continued first in the next batch
(partial-rollout continuation, T1 §10; see that module for what happens to each trial of the tail).
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from t1_rollout.compaction import compaction_metrics
from t1_rollout.continuation import Continuation, Parked, settle_tail
from t1_rollout.parking import Parking
from t1_rollout.retention import OUTCOMES, retention_tables
from t1_rollout.trial import TrialRecord, new_trial_id
from t1_sandbox.token_bucket import CreationPacer
from t1_spec import RolloutSpec
from t1_tasks import Task
from t1_tito import DriftAudit


class TaskSource(Protocol):
    """Where a batch's tasks come from: `t1_tasks.pool.StepTasks` (the pool's per-epoch seeded order)."""

    def draw(self, n: int, *, exclude: frozenset[str] = frozenset()) -> list[tuple[int, Task]]:
        """The next ``n`` distinct tasks as ``(epoch, task)`` pairs, in launch order, none in ``exclude``.

        ``exclude`` (task ids held by trials continued from the previous batch) is passed only when a batch
        continues trials; a source used without continuation may take ``n`` alone.
        """
        ...


@dataclass(frozen=True)
class SchedulerConfig:
    """Oversampling and admission limits (the recipe's ``rollout`` section, `from_spec`).

    Attributes:
        launched: trials launched per batch, tasks drawn from the source (T1 §7.4: 560).
        admitted: finished trials a batch needs (the PPO batch; T1 §7.4: 512).
        concurrency: trials in flight at once (the per-node cap).
        creation_rate_per_s: sandbox creations per second (token-bucket refill rate; T1: 6).
        creation_quota_per_min: provider quota on creations per minute (T1: 600).
        samples_per_task: trials per drawn task, one group (``ppo.samples_per_task``; T1: 1). ``launched``
            and ``admitted`` count trials and must both be multiples of it: ``launched / samples_per_task``
            tasks are drawn and ``admitted / samples_per_task`` whole groups admitted.
    """

    launched: int
    admitted: int
    concurrency: int
    creation_rate_per_s: float
    creation_quota_per_min: float
    samples_per_task: int = 1

    def __post_init__(self) -> None:
        """Refuse a config no batch can run under.

        Raises:
            TypeError: a field of the wrong type (a bool, a string).
            ValueError: ``launched``, ``admitted``, ``concurrency`` or ``samples_per_task`` below 1, fewer
                launched than admitted, ``launched`` or ``admitted`` not a multiple of ``samples_per_task``,
                a creation rate that is not a finite number > 0, or a quota that is not a finite number >= 1
                (the bucket must hold one creation).
        """
        for name in ("admitted", "concurrency", "launched", "samples_per_task"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"SchedulerConfig.{name} must be an int, got {value!r}")
            if value < 1:
                raise ValueError(f"SchedulerConfig.{name} must be >= 1, got {value}")
        for name, low in (("creation_rate_per_s", 0.0), ("creation_quota_per_min", 1.0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"SchedulerConfig.{name} must be a number, got {value!r}")
            if not math.isfinite(value) or value < low or value == 0:
                need = "> 0" if low == 0 else f">= {low:g}"
                raise ValueError(f"SchedulerConfig.{name} must be a finite number {need}, got {value}")
        if self.launched < self.admitted:
            raise ValueError(
                f"launched {self.launched} trials for a batch of {self.admitted}: launch at least as many"
            )
        g = self.samples_per_task
        for name in ("launched", "admitted"):
            value = getattr(self, name)
            if value % g:
                raise ValueError(
                    f"SchedulerConfig.{name} {value} is not a multiple of samples_per_task {g}: trials "
                    f"launch and are admitted in whole groups of {g}; set rollout.{name} to "
                    f"{max(g, value // g * g)} or {(value // g + 1) * g}"
                )

    @classmethod
    def from_spec(cls, rollout: RolloutSpec, samples_per_task: int = 1) -> SchedulerConfig:
        """The limits of the recipe's ``rollout`` section, with ``ppo.samples_per_task`` trials per task."""
        return cls(
            launched=rollout.launched,
            admitted=rollout.admitted,
            concurrency=rollout.concurrency,
            creation_rate_per_s=rollout.creation_rate_per_s,
            creation_quota_per_min=rollout.creation_quota_per_min,
            samples_per_task=samples_per_task,
        )


@dataclass
class BatchResult:
    """The outcome of one oversampled batch.

    Attributes:
        admitted: finished trials admitted into the batch, in completion order.
        finished_late: trials that finished after the batch was full (not trained on).
        failed: trials that failed, each with its cause.
        cancelled: trials cancelled as the straggler tail, and the unfinished siblings of a member that
            failed (their group can no longer be admitted).
        dropped: finished trials not trained on because a member of their group failed or was cancelled
            (empty with one sample per task).
        launched: trials launched.
        epochs: the pool epoch each drawn task was drawn from, in launch order (``[launched /
            samples_per_task]``).
        samples_per_task: trials per task, the group size (1 in the paper).
        groups_admitted: whole groups admitted (``len(admitted) / samples_per_task``).
        groups_dropped: groups that lost a member to failure (their finished members are in ``dropped``).
        wall_s: wall time of the batch, seconds.
        parked: trials carried to the next batch (partial-rollout continuation, outcome ``continued``):
            parked at a turn boundary, or finished within the park bound after the batch was full.
        resumed: trials continued from the previous batch (they are also in the list of their outcome here).
        cancelled_max_resumes: tail trials cancelled because they were continued ``max_resumes`` times.
        cancelled_unparked: tail trials cancelled because they neither parked nor ended within the bound.
        continuation: whether the batch ran with continuation (its metrics then carry its figures).
    """

    admitted: list[TrialRecord] = field(default_factory=list)
    finished_late: list[TrialRecord] = field(default_factory=list)
    failed: list[TrialRecord] = field(default_factory=list)
    cancelled: list[TrialRecord] = field(default_factory=list)
    dropped: list[TrialRecord] = field(default_factory=list)
    launched: int = 0
    epochs: list[int] = field(default_factory=list)
    samples_per_task: int = 1
    groups_admitted: int = 0
    groups_dropped: int = 0
    wall_s: float = 0.0
    parked: list[TrialRecord] = field(default_factory=list)
    resumed: list[TrialRecord] = field(default_factory=list)
    cancelled_max_resumes: int = 0
    cancelled_unparked: int = 0
    continuation: bool = False

    def _everyone(self) -> list[TrialRecord]:
        """Every trial of the batch, whatever its outcome."""
        return self.admitted + self.finished_late + self.failed + self.cancelled + self.dropped + self.parked

    def retention_by_family(self) -> dict[str, float]:
        """Fraction of launched trials of each family that were admitted (T1 §10 oversampling bias)."""
        launched = Counter(r.family for r in self._everyone())
        kept = Counter(r.family for r in self.admitted)
        return {family: kept[family] / n for family, n in sorted(launched.items())}

    def outcomes(self) -> list[tuple[str, TrialRecord]]:
        """Every launched trial with its outcome (`t1_rollout.retention.OUTCOMES`: admitted ones are kept)."""
        lists = (self.admitted, self.finished_late, self.cancelled, self.failed, self.dropped, self.parked)
        return [(outcome, r) for outcome, records in zip(OUTCOMES, lists, strict=True) for r in records]

    def metrics(self, *, compaction_max_failure_rate: float | None = None) -> dict[str, Any]:
        """The step's rollout metrics, from the admitted trials and the failures.

        Reward and assertion figures are over admitted trials only (those trained on); failures are counted
        by cause stage and never enter the reward mean. A mean over nothing is None, not 0.

        Returns:
            JSON-ready values: reward and assertion means, fallbacks by cause, ``report_duplicates`` (report
            entries that repeated a test name, folded to one and never counted twice), parse-failure rate,
            turn and token means, loss tokens, TITO drift over the loss region, chunk splits, trial counts
            by outcome (``trials_tampered``: finished trials whose report was refused as tampered;
            ``trials_dropped_with_group``: finished trials whose group lost a member), the group figures
            (``samples_per_task``, ``groups_admitted``, ``groups_dropped``), failures by stage, retention by
            family (T1 §10), the samples' policy versions and the episodes' finish reasons; the compaction
            figures of every trial that ran an episode (`t1_rollout.compaction.compaction_metrics`, warning
            above ``compaction_max_failure_rate``), and ``chunks_per_trajectory_mean`` / ``_max`` over
            admitted trials: every chunk carries the trajectory's reward on its last sampled token (T1 §5),
            so a compacted trajectory weighs more. Last, the retention tables of `t1_rollout.retention`
            (``retention_by_family_outcome``, ``retention_by_turns``, ``retention_by_tokens``,
            ``retention_by_reward``): per bucket, the launched trials, the count of each outcome and the
            kept fraction; a cancelled trial counts at the length it had reached and in the ``unscored``
            reward row; a parked one likewise, under the outcome ``continued``. With continuation
            (`continuation_metrics`): the trials parked, continued and cancelled past ``max_resumes``.
        """
        admitted = self.admitted
        rewards = [r.reward.value for r in admitted if r.reward and r.reward.value is not None]
        passed = [r.reward.passed for r in admitted if r.reward and r.reward.total]
        total = [r.reward.total for r in admitted if r.reward and r.reward.total]
        fallbacks = Counter(str(r.reward.fallback) for r in admitted if r.reward and r.reward.fallback)
        episodes = [r.episode for r in admitted if r.episode]
        n_turns = [e.agent_turns for e in episodes]  # summary turns are no actions (t1_rollout.compaction)
        parse_fail = sum(e.parse_failures for e in episodes)
        samples = [s for r in admitted for s in r.samples]
        audits = [r.stitch.audit for r in admitted if r.stitch]
        loss_tokens = sum(a.loss_tokens for a in audits)
        drifted = sum(a.drifted_loss_tokens for a in audits)
        failure_stages = Counter((r.cause or "unknown").split(":", 1)[0] for r in self.failed)
        chunks = [len(r.samples) for r in admitted if r.samples]
        # a parked trial's compactions are counted in the step where it ends, with the rest of its episode
        everyone = admitted + self.finished_late + self.failed + self.cancelled + self.dropped
        finished = admitted + self.finished_late + self.dropped
        return {
            "reward_mean": statistics.fmean(rewards) if rewards else None,
            "assertions_passed_mean": statistics.fmean(passed) if passed else None,
            "assertions_total_mean": statistics.fmean(total) if total else None,
            "fallbacks": dict(fallbacks),
            "report_duplicates": sum(r.reward.duplicates for r in admitted if r.reward),
            "parse_failure_rate": parse_fail / sum(n_turns) if sum(n_turns) else None,
            "turns_mean": statistics.fmean(n_turns) if n_turns else None,
            "tokens_mean": statistics.fmean(len(s.token_ids) for s in samples) if samples else None,
            "loss_tokens": int(sum(int(s.loss_mask.sum()) for s in samples)),
            "tito_drift_loss_region": drifted / loss_tokens if loss_tokens else None,
            "tito_drifted_tokens": drifted,
            "chunks_split": sum(a.splits for a in audits),
            # boundary cases over the step (T1 §4.1) and the tokens trained on sampled ids where inference
            # saw the harness's re-tokenization (the paper's 2.6%)
            "tito_boundaries": DriftAudit.total(audits).case_counts if audits else {},
            "tito_retokenized_context_fraction": DriftAudit.total(audits).retokenized_context_fraction
            if audits
            else None,
            "samples": len(samples),
            "trials_launched": self.launched,
            "trials_admitted": len(admitted),
            "trials_finished": len(finished),
            "trials_failed": len(self.failed),
            "trials_cancelled": len(self.cancelled),
            "trials_dropped_with_group": len(self.dropped),
            "samples_per_task": self.samples_per_task,
            "groups_admitted": self.groups_admitted,
            "groups_dropped": self.groups_dropped,
            # refused reports (scored 0, trained on): finished trials whose report was tampered with
            "trials_tampered": sum(r.tampered for r in finished),
            "failures_by_stage": dict(failure_stages),
            "retention_by_family": self.retention_by_family(),
            "policy_versions": [s.policy_version for s in samples],
            "finish_reasons": dict(Counter(e.finish for e in episodes)),
            "chunks_per_trajectory_mean": statistics.fmean(chunks) if chunks else None,
            "chunks_per_trajectory_max": max(chunks) if chunks else None,
            **compaction_metrics(
                (c for r in everyone if r.episode for c in r.episode.compactions),
                max_failure_rate=compaction_max_failure_rate,
            ),
            **retention_tables(self.outcomes()),
            **(self.continuation_metrics() if self.continuation else {}),
        }

    def continuation_metrics(self) -> dict[str, Any]:
        """The batch's partial-rollout continuation figures (T1 §10), JSON-ready.

        Returns:
            ``trials_parked`` (carried to the next batch, outcome ``continued``), of them
            ``trials_parked_finished`` (finished within the park bound, carried as finished records);
            ``trials_resumed`` (continued from the previous batch) and of them ``trials_resumed_admitted``;
            ``trials_cancelled_max_resumes`` and ``trials_cancelled_unparked`` (tail trials cancelled as
            without continuation: continued ``max_resumes`` times already, or not parked within the bound);
            ``turns_resampled`` (partial turns discarded at a park, over the admitted trials);
            ``samples_versions_mixed`` (admitted samples whose turns span more than one weight version) and
            ``sampled_tokens_by_policy_version`` (the admitted trials' sampled tokens per weight version).
        """
        resumed = {id(r) for r in self.resumed}
        tokens: Counter[int] = Counter()
        for r in self.admitted:
            for turn in r.episode.turns if r.episode else ():
                tokens[turn.policy_version] += len(turn.output_ids)
        return {
            "trials_parked": len(self.parked),
            "trials_parked_finished": sum(r.status == "finished" for r in self.parked),
            "trials_resumed": len(self.resumed),
            "trials_resumed_admitted": sum(id(r) in resumed for r in self.admitted),
            "trials_cancelled_max_resumes": self.cancelled_max_resumes,
            "trials_cancelled_unparked": self.cancelled_unparked,
            "turns_resampled": sum(r.episode.resampled_turns for r in self.admitted if r.episode),
            "samples_versions_mixed": sum(s.policy_versions_mixed for r in self.admitted for s in r.samples),
            "sampled_tokens_by_policy_version": {str(v): n for v, n in sorted(tokens.items())},
        }


async def collect_batch(
    source: TaskSource,
    run_one: Callable[[Task, TrialRecord], Awaitable[TrialRecord]],
    config: SchedulerConfig,
    *,
    on_trial_done: Callable[[TrialRecord], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    continuation: Continuation | None = None,
    park_tail: bool = True,
) -> BatchResult:
    """Draw tasks, run ``samples_per_task`` trials on each, admit the first whole groups that finish.

    ``config.launched / samples_per_task`` tasks are drawn and each gets ``samples_per_task`` trials, launched
    one group after the other (launch indices ``k * G .. k * G + G - 1`` for task ``k``, so every member
    samples with its own seed). A group closes when its last member ends, so an admitted group waited on its
    slowest member (T1 §9). A closed group whose members all finished is admitted while the batch has room,
    otherwise it finished late. A group with a failed member is dropped whole: the failure is an
    infrastructure or harness failure, not the agent's 0 (T1 §5), so it cannot be scored inside the group,
    and a group normalized over fewer members than ``samples_per_task`` would carry another baseline than
    its siblings'. Its unfinished members are cancelled at once (freeing their slots for other groups) and
    its finished members are kept in ``BatchResult.dropped``, never trained on; oversampling makes up the
    loss. (verl and SkyRL have no failed-trial state to copy: their rollouts either return or abort the
    step.) With one sample per task every group is one trial and this is plain oversampling.

    The trials still running once the batch is full are cancelled (the straggler tail, T1 §7.4), or, with a
    ``continuation``, parked and carried to the next batch (`t1_rollout.continuation.settle_tail`). The
    trials the continuation carries from the previous batch are continued first: they take the first launch
    slots (a concurrency slot each, no sandbox creation, no token), and only ``launched`` minus their count
    tasks are drawn fresh, none of them a task a carried trial holds.

    Args:
        source: where the tasks come from (`t1_tasks.pool.StepTasks`); ``launched / samples_per_task`` are
            drawn (fewer by the carried trials), in launch order, and the epoch of each is kept in
            ``BatchResult.epochs`` (a carried trial keeps the epoch it was drawn in).
        run_one: runs a trial and fills the given record (e.g. :func:`t1_rollout.trial.run_trial` bound to the
            engine and sandbox factory); it must record failures rather than raise. With a continuation it
            must honour ``record.parking`` (`t1_rollout.trial.run_trial` does).
        config: oversampling and admission limits.
        on_trial_done: called with each trial's record as the scheduler takes it in (finished, failed, or a
            cancelled sibling of a failed member), e.g. to advance a progress bar; not for the tail cancelled
            or parked at the end. An exception it raises propagates, after the tail is cancelled and
            reclaimed.
        clock: the time source of the token buckets and of ``BatchResult.wall_s``, seconds
            (``time.monotonic``); a simulation on a virtual-time event loop passes the loop's ``time``.
        continuation: the run's partial-rollout continuation (T1 §10): the trials it carries are continued
            in this batch and this batch's tail is parked into it; None (the paper's default) cancels the
            tail. Every call must run on the same event loop.
        park_tail: with a ``continuation``, park this batch's tail (the default); False continues the
            carried trials but cancels the tail, so that nothing is held after the batch (a checkpoint
            follows it: a parked trial's live sandbox cannot be saved).

    Returns:
        The :class:`BatchResult`. When fewer groups finish than ``config.admitted / samples_per_task``, the
        batch is short: every complete group is admitted and the shortfall is visible in the counts.

    Raises:
        ValueError: the source gives another number of tasks than asked, a config field is out of range
            (see `SchedulerConfig`), or a continuation with ``samples_per_task > 1`` (groups are not built
            with continuation).
        TypeError: a config field of the wrong type.
    """
    config = _checked(config)
    g_size = config.samples_per_task
    if continuation is not None and g_size != 1:
        raise ValueError(
            f"partial-rollout continuation parks single trials; samples_per_task {g_size} groups are not "
            "built with it (a group would straddle two steps and two weight versions)"
        )
    drawn = _draw(source, config, continuation)
    carried = continuation.take() if continuation is not None else []
    start = clock()
    batch = _Batch(config, carried, drawn, run_one, on_trial_done, clock, continuation is not None)
    try:
        while batch.pending and batch.result.groups_admitted < batch.groups_needed:
            done, _ = await asyncio.wait(batch.pending, return_when=asyncio.FIRST_COMPLETED)
            # Trials completing in the same wake-up are taken in launch order: admission is deterministic.
            for fut in sorted(done, key=batch.launch_order.__getitem__):
                batch.take_in(fut)
        if continuation is not None and park_tail and batch.pending:
            await batch.park_tail(continuation)
    finally:
        await batch.reclaim()  # every sandbox is reclaimed before we return, on any exit
    batch.result.wall_s = clock() - start
    return batch.result


def _checked(config: SchedulerConfig) -> SchedulerConfig:
    """``config`` checked again (`SchedulerConfig.__post_init__`), a duck-typed one rebuilt as one."""
    if not isinstance(config, SchedulerConfig):  # a duck-typed config gets the same checks
        return SchedulerConfig(
            launched=config.launched,
            admitted=config.admitted,
            concurrency=config.concurrency,
            creation_rate_per_s=config.creation_rate_per_s,
            creation_quota_per_min=config.creation_quota_per_min,
            samples_per_task=getattr(config, "samples_per_task", 1),
        )
    config.__post_init__()  # a frozen config can still be altered with object.__setattr__
    return config


def _draw(
    source: TaskSource, config: SchedulerConfig, continuation: Continuation | None
) -> list[tuple[int, Task]]:
    """The batch's fresh ``(epoch, task)`` pairs: ``launched / samples_per_task`` less the carried trials.

    Raises:
        ValueError: the source gave another number of tasks than asked.
    """
    g_size = config.samples_per_task
    n_tasks = config.launched // g_size
    n_carried = len(continuation) if continuation is not None else 0
    n_fresh = n_tasks - n_carried
    drawn = source.draw(n_fresh, exclude=continuation.task_ids()) if n_carried else source.draw(n_tasks)
    if len(drawn) != n_fresh:
        carried_note = f", less {n_carried} continued" if n_carried else ""
        raise ValueError(
            f"the task source gave {len(drawn)} tasks for rollout.launched={config.launched} at "
            f"samples_per_task={g_size} ({n_tasks} tasks{carried_note}); a batch launches exactly the "
            "configured count"
        )
    return drawn


class _Batch:
    """One batch's launched trials and their bookkeeping, from the launch to the final reclaim.

    Built by `collect_batch`, which launches every group at construction, takes in finished trials
    (`take_in`), settles the tail with a continuation (`park_tail`) and always ends with `reclaim`.
    """

    def __init__(
        self,
        config: SchedulerConfig,
        carried: list[Parked],
        drawn: list[tuple[int, Task]],
        run_one: Callable[[Task, TrialRecord], Awaitable[TrialRecord]],
        on_trial_done: Callable[[TrialRecord], None] | None,
        clock: Callable[[], float],
        continued: bool,
    ) -> None:
        g_size = config.samples_per_task
        self.g_size, self.run_one, self.on_trial_done = g_size, run_one, on_trial_done
        self.gate = asyncio.Semaphore(config.concurrency)
        self.pacer = CreationPacer(config.creation_rate_per_s, config.creation_quota_per_min, clock=clock)
        self.result = BatchResult(
            launched=config.launched,
            epochs=[p.epoch for p in carried] + [epoch for epoch, _ in drawn],
            samples_per_task=g_size,
            resumed=[p.record for p in carried],
            continuation=continued,
        )
        self.groups = [[p.record] for p in carried] + [
            [
                TrialRecord(
                    trial_id=new_trial_id(t.id),
                    task_id=t.id,
                    family=t.category,
                    launch_index=k * g_size + m,
                    parking=Parking() if continued else None,
                )
                for m in range(g_size)
            ]
            for k, (_, t) in enumerate(drawn, start=len(carried))
        ]
        self.ended = [0] * len(self.groups)
        self.lost: set[int] = set()
        self.closed: set[int] = set()
        self.groups_needed = config.admitted // g_size
        self.started: set[asyncio.Future[TrialRecord]] = set()
        self.pending: dict[asyncio.Future[TrialRecord], TrialRecord] = {}
        self.group_of: dict[asyncio.Future[TrialRecord], int] = {}
        self.drawn_as: dict[asyncio.Future[TrialRecord], tuple[Task, int]] = {}  # the task and its epoch
        self.futures: list[list[asyncio.Future[TrialRecord]]] = []  # per group, its members' futures
        self.notes: dict[asyncio.Future[TrialRecord], str] = {}  # why a tail trial was cancelled
        launches = [(p.task, p.epoch, p) for p in carried] + [(t, e, None) for e, t in drawn]
        for k, (task, epoch, parked) in enumerate(launches):
            self.launch_group(k, task, epoch, parked)
        self.launch_order = {fut: i for i, fut in enumerate(self.pending)}

    def launch_group(self, k: int, task: Task, epoch: int, parked: Parked | None) -> None:
        """Start group ``k``: its members on ``task``, or the carried trial ``parked`` resumed."""
        if parked is not None:
            futs = [asyncio.create_task(self.resumed(parked))]
        else:
            futs = [asyncio.create_task(self.guarded(task, r)) for r in self.groups[k]]
        for fut, r in zip(futs, self.groups[k], strict=True):
            self.pending[fut], self.group_of[fut], self.drawn_as[fut] = r, k, (task, epoch)
        self.futures.append(futs)

    async def guarded(self, task: Task, record: TrialRecord) -> TrialRecord:
        """Run a fresh trial under the concurrency gate, paced by the creation token bucket."""
        async with self.gate:
            await self.pacer.acquire()
            self.started.add(asyncio.current_task())
            return await self.run_one(task, record)

    async def resumed(self, parked: Parked) -> TrialRecord:
        """Resume a carried trial under the concurrency gate (no sandbox creation, no token)."""
        try:
            async with self.gate:
                self.started.add(asyncio.current_task())
                if parked.record.parking is not None:
                    parked.record.parking.resume()
                return await parked.future
        except asyncio.CancelledError:
            if not parked.future.done():  # cancelled before it was resumed: it is still parked
                parked.future.cancel()
                await asyncio.wait({parked.future})  # its sandbox is reclaimed before the batch returns
            raise

    def close(self, k: int) -> None:
        """Group ``k`` ended: admit, drop or mark late its finished members."""
        result = self.result
        self.closed.add(k)
        finished = [r for r in self.groups[k] if r.status == "finished"]
        if k in self.lost:
            result.dropped.extend(finished)
        elif result.groups_admitted < self.groups_needed:
            result.admitted.extend(finished)
            result.groups_admitted += 1
        else:
            result.finished_late.extend(finished)

    def take_in(self, fut: asyncio.Future[TrialRecord]) -> None:
        """Take in an ended trial; a failed one loses its group and cancels its unfinished siblings."""
        record = self.pending.pop(fut)
        k = self.group_of[fut]
        self.ended[k] += 1
        if fut.cancelled():  # a sibling of a failed member, cancelled below
            record.status = "cancelled"
            self.result.cancelled.append(record)
        else:
            exc = fut.exception()
            if exc is not None:
                record.status = "failed"
                record.cause = record.cause or f"scheduler: {type(exc).__name__}: {exc}"
            if record.status != "finished":
                self.result.failed.append(record)
                if k not in self.lost:
                    self.lost.add(k)
                    self.result.groups_dropped += 1
                    for sibling, sib in zip(self.groups[k], self.futures[k], strict=True):
                        if sib in self.pending and sib.cancel():
                            sibling.cause = f"scheduler: cancelled, its group lost {record.trial_id}"
        if self.on_trial_done is not None:
            self.on_trial_done(record)
        if self.ended[k] == self.g_size:
            self.close(k)

    async def park_tail(self, continuation: Continuation) -> None:
        """Park the tail into ``continuation`` (`settle_tail`); what it cannot park stays for `reclaim`."""
        tail = await settle_tail(self.pending, self.started, continuation.config)
        for fut in tail.ended:
            self.take_in(fut)
        for fut in tail.parked + tail.finished:
            record = self.pending.pop(fut)
            self.closed.add(self.group_of[fut])
            if record.status != "finished":
                record.status = "parked"
            self.result.parked.append(record)
            continuation.keep(Parked(fut, record, *self.drawn_as[fut]))
        cfg, notes = continuation.config, self.notes
        for fut in tail.over_limit:
            notes[fut] = f"continued {self.pending[fut].resumes} time(s), rollout.continuation.max_resumes"
        for fut in tail.late:
            notes[fut] = f"not parked within rollout.continuation.park_timeout_s={cfg.park_timeout_s:g} s"
        self.result.cancelled_max_resumes = len(tail.over_limit)
        self.result.cancelled_unparked = len(tail.late)

    async def reclaim(self) -> None:
        """Cancel the straggler tail and wait for it, then file every trial not yet in the result."""
        result, pending = self.result, self.pending
        for fut in pending:
            fut.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        for k, members in enumerate(self.groups):  # finished members of groups the full batch left open
            if k not in self.closed:
                done_members = [
                    r
                    for r, f in zip(members, self.futures[k], strict=True)
                    if r.status == "finished" and f not in pending
                ]
                (result.dropped if k in self.lost else result.finished_late).extend(done_members)
        for fut, record in pending.items():
            if record.status == "finished":
                result.finished_late.append(record)
            else:
                record.status = "cancelled"
                record.cause = record.cause or "scheduler: cancelled before it started"
                if fut in self.notes:
                    record.cause += f" ({self.notes[fut]})"
                result.cancelled.append(record)
