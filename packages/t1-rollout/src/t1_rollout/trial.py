"""One trial: sandbox -> environment -> agent episode -> held-out verifier -> reward -> stitched samples.

A trial never loses its cause: every failure is recorded in :class:`TrialRecord` with the stage it happened
in. A failure of the infrastructure (sandbox start, engine, a T1-side call of the verifier run) marks the
trial ``failed`` and it is never scored as the agent's 0 (T1 §7.4; ``../shared/reference/harbor_tb.md`` §6
lists frameworks that did); a tampered report or a verifier failure the agent caused in a healthy sandbox
is scored 0 and trained on (the one policy: ``t1_reward.judge``). The sandbox is reclaimed on every path,
cancellation included, by its async context manager. A record writes itself out for the run's
``trajectories/`` directory (`TrialRecord.to_json`).

With partial-rollout continuation (T1 §10), a record carries the scheduler's `t1_rollout.parking.Parking`
handle: the episode parks at a turn boundary when asked and the trial's coroutine, sandbox and shell wait
across the training step; the agent and remote deadlines are stopped while parked (the parked time is in
``timings["parked"]``, outside ``agent`` and ``total``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from t1_reward import Report, RewardResult, TamperEvidence
from t1_rollout.attribution import judge_run
from t1_rollout.engine.base import Engine, SamplingParams
from t1_rollout.harness import Episode, HarnessConfig
from t1_rollout.parking import Parking
from t1_rollout.verify import VerifierRun, run_verifier
from t1_sandbox.base import Sandbox, format_seconds
from t1_spec import RewardSpec, RolloutSpec
from t1_tasks import Task
from t1_tasks.validation import TaskRecord
from t1_tito import Sample, StitchResult, TitoSession

TrialStatus = Literal["finished", "failed", "cancelled", "parked"]


@dataclass(frozen=True)
class TrialLimits:
    """Per-trial deadlines, seconds (T1 §7.4: 5400 remote, 3600 agent, 900 verifier in production).

    Attributes:
        remote_deadline_s: the whole trial, sandbox creation to reclamation.
        agent_deadline_s: the agent episode.
        verifier_deadline_s: the verifier run.
        build_deadline_s: building the task environment in the sandbox.
    """

    remote_deadline_s: float
    agent_deadline_s: float
    verifier_deadline_s: float
    build_deadline_s: float = 300.0

    @classmethod
    def from_spec(cls, rollout: RolloutSpec) -> TrialLimits:
        """The deadlines of the recipe's ``rollout`` section (the build deadline keeps its 300 s)."""
        return cls(
            remote_deadline_s=rollout.remote_deadline_s,
            agent_deadline_s=rollout.agent_deadline_s,
            verifier_deadline_s=rollout.verifier_deadline_s,
        )


@dataclass
class TrialRecord:
    """Everything one trial produced, kept whether it finished or failed.

    Attributes:
        trial_id: unique id, ``<task_id>__<8 hex>``.
        task_id: the task's id.
        family: the task's category (used for retention statistics).
        status: ``finished`` (a reward exists), ``failed`` (infrastructure or harness failure, with
            ``cause``), ``cancelled`` (the scheduler cancelled the straggler tail) or ``parked`` (held at a
            turn boundary for the next step, partial-rollout continuation; the trial's own end overwrites it).
        cause: ``<stage>: <message>`` for failed and cancelled trials, and for a finished trial that
            ``t1_reward.judge`` scored 0 (tampered, or no verdict from the verifier); None otherwise.
        episode: the agent episode (may be partial).
        verifier: the verifier run, when it ran.
        report: the parsed verifier report.
        reward: the scalar reward and its provenance; ``reward.value`` is never invented for a failed trial.
        evidence: why the verifier's report was refused (``t1_reward.TamperEvidence``); non-empty means the
            trial is tagged tampered and scored 0 (``t1_reward.judge``).
        stitch: the stitched samples and the TITO drift audit (finished trials only).
        timings: seconds per stage: ``sandbox_start``, ``agent``, ``generate``, ``verifier``, ``total``;
            with continuation also ``parked`` (seconds parked between steps, not in ``agent`` nor ``total``).
        launch_index: position of the trial in its first batch's launch order (seeds its sampling).
        steps: labels of the steps the trial ran in (``step-0003``), in order; more than one when it was
            continued (partial-rollout continuation, T1 §10), none when it was cancelled before it started.
        resumes: later steps the trial was continued in (0 unless continued).
        parking: the scheduler's continuation handle (`t1_rollout.parking.Parking`), None when the tail is
            cancelled rather than parked; not written out.
        image_built_with_network: the sandbox's ``Sandbox.built_with_network`` once started (the image's
            build had network: Docker's ``sandbox.build_network``); None when unknown or not started. The
            trial's own network is ``verifier.network``.
    """

    trial_id: str
    task_id: str
    family: str
    status: TrialStatus = "failed"
    cause: str | None = None
    episode: Episode | None = None
    verifier: VerifierRun | None = None
    report: Report | None = None
    reward: RewardResult | None = None
    evidence: tuple[TamperEvidence, ...] = ()
    stitch: StitchResult | None = None
    timings: dict[str, float] = field(default_factory=dict)
    launch_index: int = 0
    steps: list[str] = field(default_factory=list)
    resumes: int = 0
    parking: Parking | None = field(default=None, repr=False, compare=False)
    image_built_with_network: bool | None = None

    @property
    def tampered(self) -> bool:
        """The verifier's report was refused as not the task's own verdict (scored 0, trained on)."""
        return bool(self.evidence)

    @property
    def samples(self) -> list[Sample]:
        """The trial's training samples (empty unless finished)."""
        return list(self.stitch.samples) if self.stitch is not None else []

    def to_json(self) -> dict[str, Any]:
        """The record as JSON-ready data, one file of the run's ``trajectories/`` directory.

        Token counts per turn, the conversation text, the reward with its provenance, the verifier's
        outcome, each sample's size and the TITO audit; token ids, log-probs and routing stay out (they are
        in the samples trained on). ``assertions_passed`` and ``assertions_total`` are None, not 0, when
        no per-assertion report was used (a fallback): the counts are unknown. ``steps`` lists the steps the
        trial ran in and ``turn_policy_versions`` the weight version of every turn, in order (a continued
        trial has turns of more than one); ``resampled_turns`` counts the partial turns discarded at a park;
        ``endpoint_calls`` says how an external harness's calls were built (`t1_rollout.endpoint.CallRecord`).

        Returns:
            A dict of str, int, float, bool, None, lists and dicts only (``json.dumps`` takes it as is).
        """
        episode = self.episode
        turns = episode.turns if episode else []
        audit = self.stitch.audit if self.stitch else None
        reward = self.reward
        counted = reward is not None and bool(reward.total)
        return {
            "trial_id": self.trial_id,
            "task_id": self.task_id,
            "family": self.family,
            "status": self.status,
            "cause": self.cause,
            "finish": episode.finish if episode else None,
            "parse_failures": episode.parse_failures if episode else 0,
            "compactions": [c.to_json() for c in episode.compactions] if episode else [],
            "summary_turns": list(episode.summary_turns) if episode else [],
            "turns": len(turns),
            "prompt_tokens": [len(t.prompt_ids) for t in turns],
            "completion_tokens": [len(t.output_ids) for t in turns],
            "policy_versions": sorted({t.policy_version for t in turns}),
            "turn_policy_versions": [t.policy_version for t in turns],
            "steps": list(self.steps),
            "resumes": self.resumes,
            "resampled_turns": episode.resampled_turns if episode else 0,
            "endpoint_calls": list(episode.endpoint_calls) if episode else [],
            "messages": episode.messages if episode else [],
            "reward": None if reward is None else reward.value,
            "assertions_passed": reward.passed if counted else None,
            "assertions_total": reward.total if counted else None,
            "fallback": None if reward is None else reward.fallback,
            "tampered": self.tampered,
            "tamper_evidence": [e.to_json() for e in self.evidence],
            "outcomes": [
                {"name": o.name, "status": o.status, "message": o.message}
                for o in (self.report.outcomes if self.report else ())
            ],
            "verifier": None
            if self.verifier is None
            else {
                "exit_code": self.verifier.exit_code,
                "timed_out": self.verifier.timed_out,
                "error": self.verifier.error,
                "signal": self.verifier.signal,
                "dir": str(self.verifier.out_dir),
                "toolchain": self.verifier.toolchain,
                "network": self.verifier.network,
            },
            "image_built_with_network": self.image_built_with_network,
            "samples": [
                {
                    "chunk": s.chunk_index,
                    "tokens": int(len(s.token_ids)),
                    "loss_tokens": int(s.loss_mask.sum()),
                }
                for s in self.samples
            ],
            "tito": None
            if audit is None
            else {
                "loss_tokens": audit.loss_tokens,
                "drifted": audit.drifted_loss_tokens,
                "splits": audit.splits,
                "boundaries": audit.case_counts,
                "total_tokens": audit.total_tokens,
                "retokenized_context_tokens": audit.retokenized_context_tokens,
                "affected_loss_tokens": audit.affected_loss_tokens,
            },
            "timings_s": self.timings,
        }


def new_trial_id(task_id: str) -> str:
    """A unique trial id for ``task_id``."""
    return f"{task_id}__{uuid.uuid4().hex[:8]}"


async def run_trial(
    task: Task,
    *,
    sandbox_factory: Callable[[], Sandbox],
    engine: Engine,
    tito: TitoSession,
    sampling: SamplingParams,
    harness: HarnessConfig,
    limits: TrialLimits,
    reward_spec: RewardSpec,
    out_dir: Path,
    record: TrialRecord | None = None,
    validated: TaskRecord | None = None,
) -> TrialRecord:
    """Run one trial end to end.

    The verifier's report is held to what is known of the task (``t1_reward.check_report``: its assertion
    count, the names its test files define, pytest's own closing line) and scored by the one policy of
    ``t1_reward.judge``: an infrastructure failure is ``failed`` (dropped), a tampered report or an
    agent-caused verifier failure is ``finished`` with reward 0 (trained on).

    Args:
        task: the task bundle.
        sandbox_factory: makes a fresh, unstarted sandbox.
        engine: the inference engine serving the behaviour policy.
        tito: the TITO session (tokenizer and chat template).
        sampling: sampling parameters.
        harness: limits of the agent episode, and the harness that runs it (``harness.agent``: T1's built-in
            loop, or an external command through the OpenAI-compatible endpoint, `t1_rollout.external`).
        limits: per-trial deadlines.
        reward_spec: the recipe's reward section (`t1_spec` dense, ratio or binary reward spec).
        out_dir: where the verifier's files are kept (``<out_dir>/<trial_id>/``).
        record: filled in place when given, so a caller that cancels the trial keeps what it had.
        validated: the task's row of a validation record accepted for the pool (``t1_tasks.record_for``);
            its observed assertion count replaces the static one as the count a report is held to.

    Returns:
        The :class:`TrialRecord`. This function does not raise for trial failures; it records them. It
        re-raises ``asyncio.CancelledError`` after marking the record ``cancelled`` (the sandbox is
        reclaimed first).
    """
    rec = record or TrialRecord(trial_id=new_trial_id(task.id), task_id=task.id, family=task.category)
    parking = rec.parking
    t_start = time.monotonic()
    stage = "sandbox_start"
    try:
        async with asyncio.timeout(limits.remote_deadline_s) as remote:
            async with sandbox_factory() as sandbox:
                t0 = time.monotonic()
                await sandbox.start(task.environment_dir, timeout_s=limits.build_deadline_s)
                rec.timings["sandbox_start"] = time.monotonic() - t0
                rec.image_built_with_network = sandbox.built_with_network

                stage = "agent"
                shell = await sandbox.open_shell()
                rec.episode = Episode()
                t0 = time.monotonic()
                try:
                    async with asyncio.timeout(limits.agent_deadline_s) as agent:
                        with _stopped_while_parked(parking, remote, agent):
                            await harness.agent.run(  # rollout.harness.kind (t1_rollout.harness.HARNESSES)
                                task=task,
                                sandbox=sandbox,
                                shell=shell,
                                engine=engine,
                                tito=tito,
                                sampling=sampling,
                                config=harness,
                                episode=rec.episode,
                                parking=parking,
                                log_path=out_dir / f"{rec.trial_id}.harness.log",
                            )
                except TimeoutError:
                    # The agent ran out of time; as in Harbor, the verifier still grades what it left behind.
                    rec.episode.finish = "agent_deadline"
                finally:
                    rec.episode.agent_time_s = time.monotonic() - t0 - _parked_s(parking)
                    if parking is not None:
                        rec.timings["parked"] = parking.parked_s
                    rec.timings["agent"] = rec.episode.agent_time_s
                    rec.timings["generate"] = rec.episode.generate_time_s
                    await shell.close()

                stage = "verifier"
                t0 = time.monotonic()
                rec.verifier = await run_verifier(
                    sandbox, task, timeout_s=limits.verifier_deadline_s, out_dir=out_dir / rec.trial_id
                )
                rec.timings["verifier"] = time.monotonic() - t0
        stage = "reward"
        rec.report, verdict = await judge_run(rec.verifier, task, reward_spec, validated=validated)
        rec.reward, rec.evidence = verdict.reward, verdict.evidence
        if verdict.status == "failed" or rec.reward.value is None:
            rec.status = "failed"
            rec.cause = verdict.cause
            return rec
        rec.cause = verdict.cause  # why a finished trial scored 0 (tampered, or no verdict), else None
        stage = "stitch"
        if not rec.episode.turns:
            rec.status = "failed"
            rec.cause = f"agent: the episode sampled no tokens (finish: {rec.episode.finish})"
            rec.evidence = ()
            if rec.episode.finish == "context_exhausted":
                rec.cause += (
                    f"; the first prompt leaves under 8 of rollout.context_tokens={harness.context_tokens}"
                    " tokens to sample: raise rollout.context_tokens"
                )
            return rec
        rec.stitch = await asyncio.to_thread(
            tito.stitch_turns,
            rec.episode.turns,
            reward=rec.reward.value,
            task_id=task.id,
            family=task.category,
            trial_id=rec.trial_id,
        )
        rec.status = "finished"
        return rec
    except asyncio.CancelledError:
        rec.status = "cancelled"
        rec.cause = f"{stage}: cancelled by the scheduler"
        raise
    except TimeoutError:
        rec.status = "failed"
        rec.cause = f"{stage}: remote deadline of {format_seconds(limits.remote_deadline_s)} exceeded"
        return rec
    except Exception as exc:  # noqa: BLE001 - a trial records every failure with its stage and cause
        rec.status = "failed"
        last = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        where = f" ({Path(last.filename).name}:{last.lineno})" if last else ""
        message = " ".join(str(exc).split())  # one line: causes are printed and logged per trial
        rec.cause = f"{stage}: {type(exc).__name__}: {message}{where}"
        return rec
    finally:
        rec.timings["total"] = time.monotonic() - t_start - _parked_s(parking)


def _stopped_while_parked(
    parking: Parking | None, *deadlines: asyncio.Timeout
) -> contextlib.AbstractContextManager[None]:
    """``parking.stopped_while_parked(*deadlines)``, or nothing when the trial never parks."""
    return contextlib.nullcontext() if parking is None else parking.stopped_while_parked(*deadlines)


def _parked_s(parking: Parking | None) -> float:
    """Seconds the trial spent parked (0 when it never parks)."""
    return parking.parked_s if parking is not None else 0.0
