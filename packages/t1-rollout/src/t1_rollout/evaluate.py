"""Held-out evaluation: a policy on every task of a pool, ``evaluation.attempts`` attempts each (T1 §6).

Three policies behind one interface (`Policy.attempt`):

- ``model``: the engine and the agent harness through `t1_rollout.trial.run_trial`, with the evaluation
  settings of the recipe (`EvalSettings`: turns, agent and verifier walls, context, decoding of T1 §6).
- ``oracle``: the task's reference solution ``solution/solve.sh`` replayed in a fresh sandbox, then the
  verifier (the check of `t1_rollout.validate`, reused): the ceiling of a pool. A task without
  ``solution/`` is skipped (a failed trial, cause ``no solution``), never scored 0.
- ``do-nothing``: the verifier on the untouched environment (the other check of `t1_rollout.validate`):
  the floor of a pool.

The oracle and do-nothing checks run under the task's own ``task.toml`` deadlines, as ``t1 tasks validate``
does; the model policy under the evaluation walls. Figures are computed by `t1_rollout.eval_metrics`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from t1_reward import RewardResult, score_output
from t1_reward.report import captured_output
from t1_rollout.attribution import network_cause, task_facts
from t1_rollout.compaction import CompactionAttempt, CompactionConfig, compaction_metrics
from t1_rollout.engine.base import Engine, SamplingParams
from t1_rollout.eval_metrics import EvalTrial, summarize
from t1_rollout.harness import HARNESSES, HarnessConfig
from t1_rollout.trial import TrialLimits, TrialRecord, run_trial
from t1_rollout.validate import SandboxLedger, run_check
from t1_sandbox.base import Sandbox
from t1_sandbox.unreached import unreached_cause
from t1_spec import Recipe, RewardSpec
from t1_tasks import Pool, Task
from t1_tito import TitoSession

__all__ = [
    "POLICIES",
    "CheckPolicy",
    "EvalReport",
    "EvalSettings",
    "ModelPolicy",
    "Policy",
    "evaluate_pool",
    "is_resolved",
    "resolved_outcome",
]

PolicyName = Literal["model", "oracle", "do-nothing"]
POLICIES: tuple[PolicyName, ...] = ("model", "oracle", "do-nothing")
"""The policies ``t1 eval --policy`` takes."""

BUILD_DEADLINE_S = 300.0  # building the task environment, as in training (TrialLimits)


@dataclass(frozen=True)
class EvalSettings:
    """The recipe's evaluation settings, as a trial uses them (T1 §6).

    Attributes:
        attempts: attempts per task (``evaluation.attempts``; T1: 3).
        harness: episode limits: ``evaluation.max_turns``, ``agent_wall_s``, the context window
            ``evaluation.context_tokens`` capped by ``model.max_position_embeddings``,
            ``rollout.max_new_tokens`` per turn, and, with ``evaluation.compaction``, context compaction at
            ``evaluation.compaction_threshold_tokens`` (default ``rollout.compaction_threshold_tokens``,
            lowered to fit a capped context) with the training summary cap.
        limits: trial deadlines: agent ``evaluation.agent_wall_s``, verifier ``evaluation.verifier_wall_s``,
            the whole trial ``min(total_timeout_s, build + agent + verifier)``.
        sampling: decoding: ``evaluation.temperature``, ``top_p``, ``top_k`` (T1: 0.1, 0.95, 20).
        total_timeout_s: the whole evaluation pass (seconds; T1: 18,000 s); trials not done by then fail.
        concurrency: trials in flight at once (``rollout.concurrency``).
        thinking: open a think block in every generation prompt (``evaluation.thinking``).
        notes: what the settings change or leave unbuilt, one line each (printed, never silent).
        compaction_max_failure_rate: ``rollout.compaction_max_failure_rate``: above it an evaluation's row
            carries a ``compaction_warning``.
    """

    attempts: int
    harness: HarnessConfig
    limits: TrialLimits
    sampling: SamplingParams
    total_timeout_s: float
    concurrency: int
    thinking: bool
    notes: tuple[str, ...] = ()
    compaction_max_failure_rate: float | None = None

    @classmethod
    def from_recipe(cls, recipe: Recipe) -> EvalSettings:
        """The settings of the recipe's ``evaluation`` section (with the model's context bound)."""
        e, ro = recipe.evaluation, recipe.rollout
        notes = []
        context = e.context_tokens
        if context > recipe.model.max_position_embeddings:
            context = recipe.model.max_position_embeddings
            notes.append(
                f"evaluation.context_tokens {e.context_tokens}: capped at model.max_position_embeddings "
                f"({context} tokens), the longest position the model is configured for"
            )
        compaction = None
        if e.compaction:
            compaction = CompactionConfig.from_spec(ro, threshold_tokens=e.compaction_threshold_tokens)
            cap, room = (
                compaction.summary_max_tokens,
                context - ro.max_new_tokens - compaction.summary_max_tokens,
            )
            fits = f"a turn of {ro.max_new_tokens} and a summary of {cap} tokens"
            if room < 1:
                compaction = None
                notes.append(
                    f"evaluation.compaction: off, the {context}-token evaluation context has no room for "
                    f"{fits}; an episode that would overflow it ends with finish 'context_exhausted'"
                )
            elif compaction.threshold_tokens > room:
                where = "evaluation" if e.compaction_threshold_tokens is not None else "rollout"
                notes.append(
                    f"{where}.compaction_threshold_tokens {compaction.threshold_tokens}: lowered to {room} "
                    f"tokens in evaluation, so {fits} fit the {context}-token evaluation context"
                )
                compaction = CompactionConfig(threshold_tokens=room, summary_max_tokens=cap)
        build = BUILD_DEADLINE_S
        return cls(
            attempts=e.attempts,
            harness=HarnessConfig(
                max_turns=e.max_turns,
                agent_deadline_s=e.agent_wall_s,
                max_new_tokens=ro.max_new_tokens,
                context_tokens=context,
                observation_max_bytes=ro.observation_max_bytes,
                compaction=compaction,
                agent=HARNESSES.load(ro.harness.kind).from_spec(ro.harness),  # the training harness
            ),
            limits=TrialLimits(
                remote_deadline_s=min(e.total_timeout_s, build + e.agent_wall_s + e.verifier_wall_s),
                agent_deadline_s=e.agent_wall_s,
                verifier_deadline_s=e.verifier_wall_s,
                build_deadline_s=build,
            ),
            sampling=SamplingParams(
                temperature=e.temperature, top_p=e.top_p, top_k=e.top_k, max_new_tokens=ro.max_new_tokens
            ),
            total_timeout_s=e.total_timeout_s,
            concurrency=ro.concurrency,
            thinking=e.thinking,
            notes=tuple(notes),
            compaction_max_failure_rate=ro.compaction_max_failure_rate,
        )


def is_resolved(reward: RewardResult, task: Task) -> bool:
    """Whether a scored trial resolved its task (T1 §6: every assertion passes).

    With a usable per-assertion report: every reported assertion passed, and the report holds at least the
    task's statically counted assertions (``Task.n_assertions``; a report that lost some resolves nothing).
    Without one (the reward fell back to the binary outcome): the binary outcome is 1.
    """
    return resolved_outcome(reward.passed, reward.total, reward.binary, reward.fallback, task.n_assertions)


def resolved_outcome(
    passed: int, total: int, binary: float | None, fallback: object | None, n_assertions: int | None = None
) -> bool:
    """`is_resolved`'s rule on plain values, e.g. a trajectory record's fields (T1 §6).

    Args:
        passed: P, assertions passed (count).
        total: T, assertions reported (count).
        binary: the binary outcome b, or None.
        fallback: why the per-assertion report was not used, or None.
        n_assertions: the task's statically counted assertions, or None when unknown (not checked).
    """
    if fallback is None and total > 0:
        counted = n_assertions is None or total >= n_assertions
        return counted and passed == total
    return binary is not None and binary >= 1.0


def _trial(task: Task, attempt: int, **fields: Any) -> EvalTrial:
    base: dict[str, Any] = {
        "status": "failed",
        "cause": None,
        "resolved": False,
        "reward": None,
        "passed": None,
        "total": None,
        "turns": 0,
        "tokens": 0,
        "wall_s": 0.0,
    }
    base.update(fields)
    return EvalTrial(task.id, task.category, task.difficulty, attempt, **base)


def _scored(task: Task, attempt: int, reward: RewardResult, **fields: Any) -> EvalTrial:
    counted = reward.fallback is None and reward.total > 0
    return _trial(
        task,
        attempt,
        status="finished",
        resolved=is_resolved(reward, task),
        reward=reward.value,
        passed=reward.passed if counted else None,
        total=reward.total if counted else None,
        **fields,
    )


class Policy(Protocol):
    """What an evaluation runs on each task: one attempt at a time, in a fresh sandbox."""

    name: str

    async def attempt(self, task: Task, attempt: int, work_dir: Path) -> EvalTrial:
        """Run attempt ``attempt`` of ``task``, verifier files under ``work_dir``; records, never raises."""
        ...


@dataclass
class ModelPolicy:
    """The policy served by an engine, driven by the agent harness (`t1_rollout.trial.run_trial`).

    Attributes:
        engine: the engine, with the weights to evaluate (the run's current ones during training).
        tito: the tokenizer and chat template session (``thinking`` as ``evaluation.thinking``).
        settings: the evaluation settings.
        sandbox_factory: makes one fresh, unstarted sandbox per trial.
        reward_spec: the recipe's reward section (the mean reward is this reward).
        seed: seeds each attempt's sampling (with the label, the task and the attempt), apart from the
            training's seeds.
        label: names the evaluation in the seeds (e.g. ``eval-step-0010-builtin:mini``).
        compactions: every compaction attempt of the attempts run so far, in completion order
            (`evaluate_pool` reports those of its own pass).
    """

    engine: Engine
    tito: TitoSession
    settings: EvalSettings
    sandbox_factory: Callable[[], Sandbox]
    reward_spec: RewardSpec
    seed: int = 0
    label: str = "eval"
    name: str = "model"
    compactions: list[CompactionAttempt] = field(default_factory=list)

    def attempt_seed(self, task: Task, attempt: int) -> int:
        """The sampling seed of one attempt: a hash of the seed, the label, the task and the attempt."""
        return zlib.crc32(f"{self.seed}:{self.label}:{task.id}:{attempt}".encode()) & 0x7FFFFFFF

    async def attempt(self, task: Task, attempt: int, work_dir: Path) -> EvalTrial:
        """One trial of the model on ``task`` (see `Policy.attempt`)."""
        sampling = dataclasses.replace(self.settings.sampling, seed=self.attempt_seed(task, attempt))
        rec: TrialRecord = await run_trial(
            task,
            sandbox_factory=self.sandbox_factory,
            engine=self.engine,
            tito=self.tito,
            sampling=sampling,
            harness=self.settings.harness,
            limits=self.settings.limits,
            reward_spec=self.reward_spec,
            out_dir=work_dir,
        )
        turns = rec.episode.turns if rec.episode else []
        if rec.episode is not None:
            self.compactions.extend(rec.episode.compactions)
        extra = {
            "turns": rec.episode.agent_turns if rec.episode else 0,  # summary turns are no actions
            "tokens": len(turns[-1].prompt_ids) + len(turns[-1].output_ids) if turns else 0,
            "wall_s": rec.timings.get("total", 0.0),
        }
        if rec.reward is not None and rec.reward.value is not None:
            # scored, even when the episode sampled nothing: the verifier graded the environment
            return _scored(task, attempt, rec.reward, **extra)
        return _trial(task, attempt, cause=rec.cause or f"{rec.status}: no cause recorded", **extra)


NO_SOLUTION_SKIP = "skipped, the bundle has no solution/solve.sh (the oracle cannot run)"


@dataclass
class CheckPolicy:
    """The reference solution (``oracle``) or no action at all (``do-nothing``), then the verifier.

    Runs the check of `t1_rollout.validate` (``solution/solve.sh`` uploaded and run, or nothing, then the
    verifier, under the task's own deadlines) and scores the verifier's report with the recipe's reward.

    Attributes:
        name: ``oracle`` or ``do-nothing``.
        sandbox_factory: makes one fresh, unstarted sandbox per trial.
        reward_spec: the recipe's reward section.
        ledger: sandboxes created and closed (``ledger.open_now == 0`` after an interruption).
    """

    name: Literal["oracle", "do-nothing"]
    sandbox_factory: Callable[[], Sandbox]
    reward_spec: RewardSpec
    ledger: SandboxLedger = field(default_factory=SandboxLedger)

    async def attempt(self, task: Task, attempt: int, work_dir: Path) -> EvalTrial:
        """One oracle or do-nothing check of ``task`` (see `Policy.attempt`).

        The oracle of a bundle without ``solution/solve.sh`` (Harbor allows one) is skipped, no sandbox
        made: a ``failed`` trial whose cause opens ``no solution`` (never scored, so never a 0).
        """
        kind = "oracle" if self.name == "oracle" else "nop"
        if kind == "oracle" and not task.has_solution:
            return _trial(task, attempt, cause=f"no solution: {NO_SOLUTION_SKIP}")
        root = work_dir / f"attempt-{attempt}"
        check = await run_check(
            task, kind, sandbox_factory=self.sandbox_factory, work_dir=root, ledger=self.ledger
        )
        report_dir = root / task.id / kind
        extra = {"wall_s": check.duration_s}
        if check.verifier_ran and report_dir.is_dir():
            # scored by the one rule training applies (t1_reward.score_output), with the task's own facts;
            # no agent ran here, so what the verifier printed may blame the environment (as in validate)
            facts = await asyncio.to_thread(task_facts, task, None, check.network)
            cause = network_cause(task, check.network) or unreached_cause(captured_output(report_dir) or "")
            _, verdict = await asyncio.to_thread(
                score_output, report_dir, self.reward_spec, facts=facts, environment_cause=cause
            )
            if verdict.status == "finished":
                return _scored(task, attempt, verdict.reward, **extra)
            return _trial(task, attempt, cause=verdict.cause or "verifier: no verdict", **extra)
        assert check.error is not None
        stage = "solution" if check.error.startswith("solution/") else "verifier"
        return _trial(task, attempt, cause=f"{stage}: {check.error}", **extra)


@dataclass
class EvalReport:
    """One evaluation of one pool by one policy.

    Attributes:
        policy: ``model``, ``oracle`` or ``do-nothing``.
        pool: the pool's source (``builtin:mini`` or a directory).
        attempts: attempts per task.
        trials: every attempt, in pool order then attempt order.
        notes: the settings' notes (`EvalSettings.notes`).
        wall_s: wall seconds of the whole pass.
        compaction: the pass's compaction figures (`t1_rollout.compaction.compaction_metrics`) for a model
            policy; empty for the oracle and do-nothing checks.
    """

    policy: str
    pool: str
    attempts: int
    trials: list[EvalTrial]
    notes: tuple[str, ...] = ()
    wall_s: float = 0.0
    compaction: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """The figures (`t1_rollout.eval_metrics.summarize`), then the compaction figures."""
        return {**summarize(self.trials, self.attempts), **self.compaction}

    def to_json(self) -> dict[str, Any]:
        """One JSON-ready object: the figures, plus policy, pool, attempts, notes, wall and the trials."""
        return {
            "policy": self.policy,
            "pool": self.pool,
            "attempts": self.attempts,
            **self.summary(),
            "notes": list(self.notes),
            "wall_s": self.wall_s,
            "trial_rows": [t.to_json() for t in self.trials],
        }


async def evaluate_pool(
    pool: Pool,
    policy: Policy,
    *,
    attempts: int,
    concurrency: int,
    total_timeout_s: float,
    work_dir: Path | None = None,
    notes: tuple[str, ...] = (),
    on_trial: Callable[[EvalTrial], None] | None = None,
) -> EvalReport:
    """Run ``attempts`` attempts of ``policy`` on every task of ``pool``, ``concurrency`` at once (T1 §6).

    Args:
        pool: the evaluation pool.
        policy: a `ModelPolicy` or a `CheckPolicy`.
        attempts: attempts per task (>= 1).
        concurrency: trials in flight at once (>= 1).
        total_timeout_s: the whole pass (seconds); a trial still running then is cancelled (its sandbox
            reclaimed) and counted failed with that cause.
        work_dir: where verifier files are kept (default: a temporary directory, deleted afterwards).
        notes: the settings' notes, kept in the report.
        on_trial: called as each trial ends (progress display).

    Returns:
        The `EvalReport`, trials in pool order then attempt order.

    Raises:
        ValueError: ``attempts`` or ``concurrency`` below 1.
    """
    if attempts < 1 or concurrency < 1:
        raise ValueError(f"attempts and concurrency must be >= 1, got {attempts} and {concurrency}")
    gate = asyncio.Semaphore(concurrency)
    started = time.monotonic()
    tally = getattr(policy, "compactions", None)
    seen = len(tally) if tally is not None else 0
    jobs = [(task, a) for task in pool.tasks for a in range(attempts)]

    async def one(task: Task, attempt: int, root: Path) -> EvalTrial:
        async with gate:
            trial = await policy.attempt(task, attempt, root)
        if on_trial is not None:
            on_trial(trial)
        return trial

    with tempfile.TemporaryDirectory(prefix="t1-eval-") as tmp:
        root = Path(work_dir) if work_dir is not None else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        futures = [asyncio.ensure_future(one(t, a, root)) for t, a in jobs]
        done, pending = await asyncio.wait(futures, timeout=total_timeout_s)
        for fut in pending:
            fut.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
    trials = []
    for (task, a), fut in zip(jobs, futures, strict=True):
        if fut in done and fut.exception() is None:
            trials.append(fut.result())
        else:
            why = (
                f"evaluation: total timeout of {total_timeout_s:g} s exceeded"
                if fut not in done
                else f"evaluation: {type(fut.exception()).__name__}: {fut.exception()}"
            )
            trials.append(_trial(task, a, cause=why))
    settings = getattr(policy, "settings", None)
    return EvalReport(
        policy=policy.name,
        pool=pool.source,
        attempts=attempts,
        trials=trials,
        notes=notes,
        wall_s=time.monotonic() - started,
        compaction={}
        if tally is None
        else compaction_metrics(
            tally[seen:], max_failure_rate=getattr(settings, "compaction_max_failure_rate", None)
        ),
    )
