"""Held-out evaluation during training (T1 §6, §6.3)."""

from __future__ import annotations

from pydantic import Field, model_validator

from t1_spec._base import Spec, Violation, raise_if


class EvaluationSpec(Spec):
    """Held-out evaluation: one configuration for all suites (T1 §6).

    Used by ``t1 eval`` and, when ``enabled``, by the training loop every ``every_steps`` PPO steps.
    """

    enabled: bool = False
    """Run evaluation during training."""

    suites: list[str] = Field(default_factory=list)
    """Evaluation pools, each a pool source as ``pool.source`` takes it (``"builtin:mini"`` or a directory of
    task bundles, e.g. a local copy of Terminal-Bench 2.1). The paper evaluates TB 2.1, Long-Horizon TB and TB
    Hard (T1 §6); a registry name such as ``"terminal-bench@2.1"`` is not resolvable here (nothing is
    downloaded at run time): give the directory."""

    every_steps: int = Field(default=10, gt=0)
    """Evaluate every this many rollout steps (steps). 10 (T1 §6.3, Fig. 12)."""

    max_turns: int = Field(default=60, gt=0)
    """Most agent turns per evaluation trial (turns). 60 (T1 §6)."""

    agent_wall_s: float = Field(default=3600.0, gt=0)
    """Agent wall per evaluation trial (seconds). 3600 s (T1 §6)."""

    verifier_wall_s: float = Field(default=900.0, gt=0)
    """Verifier wall per evaluation trial (seconds). 900 s (T1 §6)."""

    context_tokens: int = Field(default=96_000, gt=0)
    """Context window during evaluation (tokens). 96,000 (T1 §6)."""

    temperature: float = Field(default=0.1, gt=0)
    """Decoding temperature (dimensionless). 0.1 (T1 §6)."""

    top_p: float = Field(default=0.95, gt=0, le=1)
    """Nucleus sampling probability mass (fraction). 0.95 (T1 §6)."""

    top_k: int = Field(default=20, ge=0)
    """Top-k cut (tokens); 0 = off. 20 (T1 §6)."""

    attempts: int = Field(default=3, gt=0)
    """Attempts per task (trials); the resolved rate averages them. 3 (T1 §6)."""

    total_timeout_s: float = Field(default=18_000.0, gt=0)
    """Timeout of a whole evaluation pass (seconds). 18,000 s (T1 §6)."""

    compaction: bool = True
    """Proactive context compaction: the agent summarises its own history once the context reaches
    ``compaction_threshold_tokens``, as in training (`t1_rollout.compaction`). Enabled in the paper's
    evaluation (T1 §6). When off, an episode that would overflow ``context_tokens`` ends with
    ``finish = "context_exhausted"``."""

    compaction_threshold_tokens: int | None = Field(default=None, gt=0)
    """Context length (tokens) at which an evaluation episode compacts; None = the training threshold
    ``rollout.compaction_threshold_tokens``. The summary cap is the training one
    (``rollout.compaction_summary_max_tokens``). Must be below ``context_tokens``. The paper says only "a
    configured threshold" (T1 §6); None is chosen."""

    thinking: bool = False
    """Explicit thinking in the chat template; disabled in the paper's evaluation (T1 §6)."""

    @model_validator(mode="after")
    def _check(self) -> EvaluationSpec:
        raise_if(evaluation_violations(self))
        return self


def evaluation_violations(e: EvaluationSpec) -> list[Violation]:
    """Rules of ``EvaluationSpec`` (field paths relative to the evaluation section)."""
    v: list[Violation] = []
    if not e.verifier_wall_s < e.agent_wall_s <= e.total_timeout_s:
        v.append(
            Violation(
                "evaluation.walls_nest",
                "agent_wall_s",
                f"evaluation walls must nest verifier < agent <= total (T1 §6: 900 < 3600 <= "
                f"18000 s); got verifier {e.verifier_wall_s}, agent {e.agent_wall_s}, total "
                f"{e.total_timeout_s}: reorder them",
            )
        )
    if e.compaction_threshold_tokens is not None and e.compaction_threshold_tokens >= e.context_tokens:
        v.append(
            Violation(
                "evaluation.compaction_below_context",
                "compaction_threshold_tokens",
                f"compaction_threshold_tokens {e.compaction_threshold_tokens} must be below context_tokens "
                f"{e.context_tokens}, or compaction never fires before the context overflows: lower it",
            )
        )
    if e.enabled and not e.suites:
        v.append(
            Violation(
                "evaluation.suites_required",
                "suites",
                "evaluation is enabled but suites is empty: list the evaluation pools, e.g. "
                "[/data/terminal-bench-2.1] (a directory of task bundles), or set enabled: false",
            )
        )
    return v
