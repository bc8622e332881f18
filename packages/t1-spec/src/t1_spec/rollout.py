"""Rollout: oversampling, admission control, deadlines and the agent's context budget (T1 §7, §7.4)."""

from __future__ import annotations

from pydantic import Field, model_validator

from t1_spec._base import Spec, Violation, raise_if
from t1_spec.harness import BuiltinHarnessSpec, HarnessSpec


class ContinuationSpec(Spec):
    """Partial-rollout continuation of the oversampling tail (T1 §7.4, §10); off by default, as in the paper.

    Off, the trials still running when a batch is full are cancelled (T1 §7.4). On, each is parked at a turn
    boundary instead (its sandbox, shell and episode kept) and continued first in the next step under the
    newly published weights, so long trajectories are not selected out of the batch (T1 §10). A continued
    trajectory then holds turns of two or more weight versions; the trainer takes the rollout's per-token
    log-probs as its PPO ratio's behaviour policy (T1 Eq. 17, Appendix 12). `t1_rollout.continuation`
    implements it; the recipe's rules refuse the settings it is not built with (Ray, groups, checkpoints).
    """

    enabled: bool = False
    """Park the straggler tail at a turn boundary and continue it in the next step, instead of cancelling it.
    False: the paper cancels the tail (T1 §7.4) and names continuation as a direction only (T1 §10)."""

    max_resumes: int = Field(default=1, ge=1)
    """Later steps one trial may be continued in (steps); a trial still unfinished when the batch of its last
    allowed step is full is cancelled as without continuation. A trained sample is then at most
    ``max_resumes`` weight versions older than the trainer, the most the trainer accepts. The paper gives no
    value; 1 is chosen (one version of lag, as the one-step asynchronous loop, T1 Appendix 12)."""

    park_timeout_s: float = Field(default=60.0, gt=0)
    """How long the tail may take to reach a turn boundary once the batch is full (seconds): a trial still
    running a command, starting its sandbox or running its verifier past it is cancelled as without
    continuation. The paper gives no value; 60 s is chosen, the harness's cap on one command's wait."""


class RolloutSpec(Spec):
    """How trials are launched, paced, bounded and admitted into a batch."""

    max_turns: int = Field(gt=0)
    """Most agent turns per trial (turns); a turn is one assistant message and its tool result. The paper
    trains up to 300+ turns and states no cap (T1 §1); evaluation uses 60 (``evaluation.max_turns``)."""

    launched: int = Field(gt=0)
    """Trials launched per step (trials), oversampling. 560 for a batch of 512 (T1 §7.4). With
    ``ppo.samples_per_task`` G > 1 a step draws ``launched / G`` tasks and launches G trials on each, so it
    must be a multiple of G."""

    admitted: int = Field(gt=0)
    """The first ``admitted`` trials to complete are kept (trials); the tail is cancelled. 512 (T1 §7.4). Must
    equal ``ppo.batch_size * ppo.samples_per_task``; with groups, the first ``ppo.batch_size`` groups whose
    members all finished are kept."""

    per_node_cap: int = Field(default=70, gt=0)
    """Concurrent sandboxes per auxiliary worker node (trials). 35 at batch 256, 70-94 at batch 512 (T1 §7).
    Each sandbox host of a ``runtime.kind: ray`` run runs at most this many trials at once; the embedded run
    is bounded by ``concurrency`` only."""

    creation_rate_per_s: float = Field(default=6.0, gt=0)
    """Sandbox creation token bucket refill rate (creations per second). 6 /s (T1 §7)."""

    creation_quota_per_min: float = Field(default=600.0, ge=1)
    """Provider quota on sandbox creations (creations per minute) the token bucket stays under, at least 1.
    600 /min (T1 §7)."""

    remote_deadline_s: float = Field(gt=0)
    """Whole-trial deadline on the remote sandbox (seconds): build, agent and verifier, so it must exceed
    ``agent_deadline_s + verifier_deadline_s``. 5400 s (T1 §7)."""

    agent_deadline_s: float = Field(gt=0)
    """Deadline of the agent phase (seconds). 3600 s (T1 §7)."""

    verifier_deadline_s: float = Field(gt=0)
    """Deadline of the verifier phase (seconds). 900 s (T1 §7)."""

    compaction_threshold_tokens: int = Field(gt=0)
    """Context length (tokens) at which the agent summarises its own history (proactive compaction, T1 §6,
    §9). Once the next prompt reaches it, the agent writes a summary in a turn of its own (sampled and trained
    on like any turn), the history is replaced by the task instruction and that summary, and the trajectory
    continues in a new TITO chunk that carries the trajectory's reward too (`t1_rollout.compaction`). A
    failed summary ends the episode with ``finish = "compaction_failed"``; every attempt is counted in the
    step's metrics. Must be below ``context_tokens``, with room for a turn and a summary above it."""

    compaction_summary_max_tokens: int | None = Field(default=None, gt=0)
    """Most tokens the summary turn may sample (tokens); None = ``max_new_tokens``. A summary that reaches
    it fails (cause ``token_cap``). ``compaction_threshold_tokens + max_new_tokens`` plus this must fit
    ``context_tokens``: a budget that could not hold the requested summary made 98.3% of the summary attempts
    of one T1 campaign fail (T1 §9). The paper gives no value; None is chosen."""

    compaction_max_failure_rate: float = Field(default=0.1, ge=0, le=1)
    """Fraction of a step's compaction attempts that may fail before the step table prints a warning and
    ``metrics.jsonl`` records it (``compaction_warning``). 0.1 is chosen; the paper's broken campaign failed
    98.3% of them (T1 §9)."""

    max_new_tokens: int = Field(gt=0)
    """Most tokens the policy may sample in one turn (tokens)."""

    context_tokens: int = Field(gt=0)
    """The agent's context window during training rollouts (tokens); every stitched chunk fits in it."""

    observation_max_bytes: int = Field(default=10_000, gt=0)
    """Terminal output kept per tool result (bytes): head and tail of the output, the middle elided, as
    Terminus-2 keeps 10,000 bytes (``shared/reference/harbor_tb.md``)."""

    concurrency: int = Field(gt=0)
    """Trials in flight at once on this rollout worker (trials); at scale bounded by ``per_node_cap``."""

    continuation: ContinuationSpec = Field(default_factory=ContinuationSpec)
    """Partial-rollout continuation of the cancelled tail (T1 §10); off by default, as in the paper."""

    harness: HarnessSpec = Field(default_factory=BuiltinHarnessSpec)
    """The agent harness: ``builtin`` (T1's Terminus-style loop, the default) or ``external`` (a command
    driving the model through T1's OpenAI-compatible endpoint, which records tokens, log-probs and routing
    behind every call; T1 §4.1)."""

    @model_validator(mode="after")
    def _check(self) -> RolloutSpec:
        raise_if(rollout_violations(self))
        return self


def rollout_violations(r: RolloutSpec) -> list[Violation]:
    """Rules of ``RolloutSpec`` alone (field paths relative to the rollout section)."""
    v: list[Violation] = []
    if r.admitted > r.launched:
        v.append(
            Violation(
                "rollout.admitted_le_launched",
                "admitted",
                f"admitted {r.admitted} exceeds launched {r.launched}: a step cannot keep more trials "
                "than it starts; raise launched (the paper launches 560 for 512) or lower admitted",
            )
        )
    if not r.verifier_deadline_s < r.agent_deadline_s < r.remote_deadline_s:
        v.append(
            Violation(
                "rollout.deadlines_nest",
                "agent_deadline_s",
                f"deadlines must nest verifier < agent < remote (T1 §7: 900 < 3600 < 5400 s); got "
                f"verifier {r.verifier_deadline_s}, agent {r.agent_deadline_s}, remote "
                f"{r.remote_deadline_s}: reorder them",
            )
        )
    elif r.agent_deadline_s + r.verifier_deadline_s >= r.remote_deadline_s:
        v.append(
            Violation(
                "rollout.deadlines_sum",
                "remote_deadline_s",
                f"agent {r.agent_deadline_s:g} s + verifier {r.verifier_deadline_s:g} s reach the remote "
                f"deadline {r.remote_deadline_s:g} s, which also covers building the sandbox, so the sandbox "
                "could be reclaimed mid-verification (T1 §7.3: 3600 + 900 < 5400 s): raise "
                "remote_deadline_s above their sum",
            )
        )
    if r.creation_rate_per_s * 60 > r.creation_quota_per_min:
        v.append(
            Violation(
                "rollout.creation_quota",
                "creation_rate_per_s",
                f"a creation rate of {r.creation_rate_per_s}/s is {r.creation_rate_per_s * 60:g}/min, "
                f"above the provider quota {r.creation_quota_per_min}/min: lower creation_rate_per_s "
                f"to at most {r.creation_quota_per_min / 60:g}",
            )
        )
    if r.compaction_threshold_tokens >= r.context_tokens:
        v.append(
            Violation(
                "rollout.compaction_below_context",
                "compaction_threshold_tokens",
                f"compaction_threshold_tokens {r.compaction_threshold_tokens} must be below "
                f"context_tokens {r.context_tokens}, or compaction never fires before the context "
                "overflows: lower it",
            )
        )
    summary = r.compaction_summary_max_tokens or r.max_new_tokens
    if (
        r.compaction_threshold_tokens < r.context_tokens
        and r.compaction_threshold_tokens + r.max_new_tokens + summary > r.context_tokens
    ):
        v.append(
            Violation(
                "rollout.compaction_summary_fits",
                "compaction_summary_max_tokens",
                f"compaction_threshold_tokens {r.compaction_threshold_tokens} + max_new_tokens "
                f"{r.max_new_tokens} + a summary of {summary} tokens exceed context_tokens "
                f"{r.context_tokens}: the summary could not be sampled when compaction fires (T1 §9: this "
                "mismatch failed 98.3% of summaries); lower compaction_threshold_tokens or "
                "compaction_summary_max_tokens",
            )
        )
    if r.max_new_tokens >= r.context_tokens:
        v.append(
            Violation(
                "rollout.turn_fits_context",
                "max_new_tokens",
                f"max_new_tokens {r.max_new_tokens} must be below context_tokens {r.context_tokens}: "
                "lower it",
            )
        )
    return v
