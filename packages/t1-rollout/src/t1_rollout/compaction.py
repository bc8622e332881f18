"""Proactive context compaction: the agent summarises its own history in a turn of its own (T1 §6, §9).

Terminus-2 style (``shared/reference/harbor_tb.md`` §3, "Context management"): once the next prompt reaches
``threshold_tokens``, the harness appends a summary request to the conversation and the policy samples the
summary as an ordinary assistant turn (its ids, log-probs and routing are recorded, and they enter the loss
stream like any other sampled turn, in the chunk they close). The history is then replaced by the system
prompt and the task instruction followed by that summary, and the trajectory continues in a new TITO chunk
(`t1_tito.Turn.starts_chunk` on the first turn after the summary).

Every attempt is recorded as a `CompactionAttempt`, succeeded or failed with its cause, so a budget mismatch
cannot fail silently: in one T1 campaign 98.3% of the summary attempts failed unnoticed, the fallback kept a
fragment of the history, and average turns rose from 22 to 30 (T1 §9). The causes (`CAUSES`):

- ``token_cap``: the summary hit its token cap (the engine stopped at ``max_new_tokens``, ``"length"``);
- ``too_long``: the summary ended, but the task instruction plus the summary is not below the threshold,
  so compaction could not bring the context under it;
- ``empty``: the summary holds no text;
- ``engine_error``: the engine raised, or aborted the request;
- ``no_room``: the context left fewer than `MIN_SAMPLE_TOKENS` tokens for the summary.

What the harness does on a failure is defined in `t1_rollout.harness.run_episode`: the episode ends with
``finish = "compaction_failed"`` (an engine exception propagates, as on any turn, after the attempt is
recorded); it never continues with a truncated history. `compaction_metrics` turns the attempts of a step
into its metrics row, with a warning when the failure rate exceeds ``rollout.compaction_max_failure_rate``.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from t1_spec import RolloutSpec

__all__ = [
    "CAUSES",
    "MIN_SAMPLE_TOKENS",
    "CompactionAttempt",
    "CompactionCause",
    "CompactionConfig",
    "classify_summary",
    "compaction_metrics",
    "summary_request",
]

CompactionCause = Literal["token_cap", "too_long", "empty", "engine_error", "no_room"]
CAUSES: tuple[CompactionCause, ...] = ("token_cap", "too_long", "empty", "engine_error", "no_room")
"""Why a compaction attempt failed, in the order metrics list them."""

MIN_SAMPLE_TOKENS = 8
"""Fewest tokens (tokens) a generation is given; less room than this ends an episode or fails a summary."""


@dataclass(frozen=True)
class CompactionConfig:
    """When the agent compacts its context and how long its summary may be.

    Attributes:
        threshold_tokens: compact once the next prompt reaches this many tokens
            (``rollout.compaction_threshold_tokens``; ``evaluation.compaction_threshold_tokens`` in
            evaluation).
        summary_max_tokens: tokens the summary turn may sample at most
            (``rollout.compaction_summary_max_tokens``, or ``rollout.max_new_tokens`` when that is unset);
            lowered to the room the context leaves.
    """

    threshold_tokens: int
    summary_max_tokens: int

    def __post_init__(self) -> None:
        """Refuse a threshold or cap below 1.

        Raises:
            ValueError: ``threshold_tokens`` or ``summary_max_tokens`` below 1.
        """
        for name in ("threshold_tokens", "summary_max_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"CompactionConfig.{name} must be >= 1, got {getattr(self, name)}")

    @classmethod
    def from_spec(cls, rollout: RolloutSpec, threshold_tokens: int | None = None) -> CompactionConfig:
        """The compaction settings of the recipe's ``rollout`` section.

        Args:
            rollout: the recipe's rollout section.
            threshold_tokens: a threshold other than ``rollout.compaction_threshold_tokens`` (evaluation).
        """
        cap = rollout.compaction_summary_max_tokens or rollout.max_new_tokens
        threshold = rollout.compaction_threshold_tokens if threshold_tokens is None else threshold_tokens
        return cls(threshold_tokens=threshold, summary_max_tokens=cap)


@dataclass(frozen=True)
class CompactionAttempt:
    """One compaction attempt of an episode.

    Attributes:
        turn_index: index in ``Episode.turns`` of the summary turn (where it would have been when the engine
            never answered).
        tokens_before: length of the context that triggered the attempt (the next prompt, tokens).
        tokens_after: length of the compacted prompt (tokens); None when the attempt failed.
        summary_tokens: tokens the summary turn sampled (0 when nothing was sampled).
        cause: None when it succeeded, else one of `CAUSES`.
        detail: the failure in words (what was measured against what), empty on success.
    """

    turn_index: int
    tokens_before: int
    tokens_after: int | None
    summary_tokens: int
    cause: CompactionCause | None = None
    detail: str = ""

    @property
    def succeeded(self) -> bool:
        """Whether the history was replaced by the summary."""
        return self.cause is None

    def to_json(self) -> dict[str, Any]:
        """The attempt as JSON-ready data (a trial record's ``compactions`` list)."""
        return {
            "turn": self.turn_index,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "summary_tokens": self.summary_tokens,
            "cause": self.cause,
            "detail": self.detail,
        }


def summary_request(tokens: int, context_tokens: int, max_tokens: int) -> dict[str, str]:
    """The user message asking the agent to summarise its history (Terminus-2's summary subagent prompt).

    Args:
        tokens: the context length that triggered compaction (tokens).
        context_tokens: the context window (tokens).
        max_tokens: the summary's token cap (tokens), stated to the model so it can keep within it.
    """
    return {
        "role": "user",
        "content": (
            f"Your context is nearly full ({tokens} of {context_tokens} tokens) and will be replaced by a "
            "summary you write now. Summarize your progress for yourself: what the task asks, what you have "
            "done and found, the current state of the terminal and files, and what remains to do. Answer "
            f"in plain text, not JSON, in at most {max_tokens} tokens."
        ),
    }


def classify_summary(
    finish_reason: str, output_ids: list[int], text: str, *, max_new_tokens: int, stop_ids: tuple[int, ...]
) -> tuple[CompactionCause | None, str]:
    """Whether a sampled summary can replace the history: ``(None, "")``, or a failure cause and its detail.

    Args:
        finish_reason: the engine's ``"stop"``, ``"length"`` or ``"abort"``.
        output_ids: the sampled ids ``[n]``.
        text: the decoded summary, stop ids removed.
        max_new_tokens: the cap the summary was sampled under (tokens).
        stop_ids: the ids that end a turn.
    """
    if finish_reason == "abort":
        return "engine_error", "the engine aborted the summary request"
    stopped = bool(output_ids) and output_ids[-1] in stop_ids
    if finish_reason == "length" or (not stopped and len(output_ids) >= max_new_tokens):
        return "token_cap", f"the summary reached its cap of {max_new_tokens} tokens without ending"
    if not text.strip():
        return "empty", f"the summary holds no text ({len(output_ids)} tokens sampled)"
    return None, ""


def compaction_metrics(
    attempts: Iterable[CompactionAttempt], *, max_failure_rate: float | None = None
) -> dict[str, Any]:
    """A step's compaction figures, and a warning when too many attempts failed (T1 §9).

    Args:
        attempts: every attempt of the step's trials (admitted, late, failed and cancelled alike: a failure
            that failed its trial must not vanish from the count).
        max_failure_rate: ``rollout.compaction_max_failure_rate`` (fraction); None = no warning.

    Returns:
        ``compaction_attempts``, ``compaction_succeeded``, ``compaction_failed``, ``compaction_failures``
        (count per cause of `CAUSES`, zeros included), ``compaction_failure_rate`` (failed / attempts, None
        without attempts), ``compaction_tokens_before_mean`` (over all attempts),
        ``compaction_tokens_after_mean`` (over successes), ``compaction_summary_tokens_mean`` (over attempts
        that sampled), and ``compaction_warning`` (a sentence, or None).
    """
    attempts = list(attempts)
    failures = Counter(a.cause for a in attempts if a.cause is not None)
    failed = sum(failures.values())
    rate = failed / len(attempts) if attempts else None
    after = [a.tokens_after for a in attempts if a.tokens_after is not None]
    sampled = [a.summary_tokens for a in attempts if a.summary_tokens]
    warning = None
    if rate is not None and max_failure_rate is not None and rate > max_failure_rate:
        causes = ", ".join(f"{c} {failures[c]}" for c in CAUSES if failures[c])
        warning = (
            f"{failed} of {len(attempts)} compaction attempts failed ({rate:.0%}: {causes}), above "
            f"rollout.compaction_max_failure_rate {max_failure_rate:g}; each failure ended its episode "
            "(T1 §9: silent summary failures degraded the agent's memory)"
        )
    return {
        "compaction_attempts": len(attempts),
        "compaction_succeeded": len(attempts) - failed,
        "compaction_failed": failed,
        "compaction_failures": {c: failures[c] for c in CAUSES},
        "compaction_failure_rate": rate,
        "compaction_tokens_before_mean": statistics.fmean(a.tokens_before for a in attempts)
        if attempts
        else None,
        "compaction_tokens_after_mean": statistics.fmean(after) if after else None,
        "compaction_summary_tokens_mean": statistics.fmean(sampled) if sampled else None,
        "compaction_warning": warning,
    }
