"""Rollout: oversampling, admission control, deadlines and the agent's context budget (T1 §7, §7.4)."""

from __future__ import annotations

from pydantic import Field, model_validator

from t1_spec._base import Spec, Violation, raise_if


class RolloutSpec(Spec):
    """How trials are launched, paced, bounded and admitted into a batch."""

    max_turns: int = Field(gt=0)
    """Most agent turns per trial (turns); a turn is one assistant message and its tool result. The paper
    trains up to 300+ turns and states no cap (T1 §1); evaluation uses 60 (``evaluation.max_turns``)."""

    launched: int = Field(gt=0)
    """Trials launched per step (trials), oversampling. 560 for a batch of 512 (T1 §7.4)."""

    admitted: int = Field(gt=0)
    """The first ``admitted`` trials to complete are kept (trials); the tail is cancelled. 512 (T1 §7.4). Must
    equal ``ppo.batch_size * ppo.samples_per_task``."""

    per_node_cap: int = Field(default=70, gt=0)
    """Concurrent sandboxes per auxiliary worker node (trials). 35 at batch 256, 70-94 at batch 512 (T1 §7).
    Multi-node rollout workers are not built yet: the embedded run is bounded by ``concurrency`` only."""

    creation_rate_per_s: float = Field(default=6.0, gt=0)
    """Sandbox creation token bucket refill rate (creations per second). 6 /s (T1 §7)."""

    creation_quota_per_min: float = Field(default=600.0, ge=1)
    """Provider quota on sandbox creations (creations per minute) the token bucket stays under, at least 1.
    600 /min (T1 §7)."""

    remote_deadline_s: float = Field(gt=0)
    """Whole-trial deadline on the remote sandbox (seconds): build, agent and verifier. 5400 s (T1 §7)."""

    agent_deadline_s: float = Field(gt=0)
    """Deadline of the agent phase (seconds). 3600 s (T1 §7)."""

    verifier_deadline_s: float = Field(gt=0)
    """Deadline of the verifier phase (seconds). 900 s (T1 §7)."""

    compaction_threshold_tokens: int = Field(gt=0)
    """Context length (tokens) at which the agent would summarise its own history (proactive compaction,
    T1 §6, §8). Proactive compaction is not built yet: the value is validated (below ``context_tokens``) but
    nothing reads it, and the embedded harness ends an episode with ``context_exhausted`` when the next turn
    would overflow ``context_tokens``."""

    max_new_tokens: int = Field(gt=0)
    """Most tokens the policy may sample in one turn (tokens)."""

    context_tokens: int = Field(gt=0)
    """The agent's context window during training rollouts (tokens); every stitched chunk fits in it."""

    observation_max_bytes: int = Field(default=10_000, gt=0)
    """Terminal output kept per tool result (bytes): head and tail of the output, the middle elided, as
    Terminus-2 keeps 10,000 bytes (``shared/reference/harbor_tb.md``)."""

    concurrency: int = Field(gt=0)
    """Trials in flight at once on this rollout worker (trials); at scale bounded by ``per_node_cap``."""

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
    elif r.agent_deadline_s + r.verifier_deadline_s > r.remote_deadline_s:
        v.append(
            Violation(
                "rollout.deadlines_sum",
                "remote_deadline_s",
                f"agent {r.agent_deadline_s} s + verifier {r.verifier_deadline_s} s exceed the remote "
                f"deadline {r.remote_deadline_s} s, so the sandbox could be reclaimed mid-verification: "
                "raise remote_deadline_s to at least their sum",
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
