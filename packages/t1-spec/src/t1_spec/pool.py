"""Task pool: where tasks come from and in which order a run sees them (T1 §3, §5.4)."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from t1_spec._base import Spec, Violation, raise_if


class PoolAuditSpec(Spec):
    """The audit a pool must have passed before a run trains on it (T1 §3.2, Fig. 4)."""

    file: str
    """The JSONL file that ``t1 tasks audit`` wrote for this pool (one row per task: the eight dimension
    scores, the QualityScore, hard rejects). A relative path resolves against the current working
    directory."""

    min_score: float = Field(default=3.0, ge=1, le=5)
    """Lowest QualityScore a task may have to be trained on (score on the rubric's 1-5 scale). Tasks below it,
    below a dimension's critical minimum, or hard-rejected are left out of the pool, and a task the audit file
    does not list refuses the run. 3.0, chosen (the paper selects by rank, not by a published cut)."""


class PoolSpec(Spec):
    """A task pool and the order in which its tasks are handed out."""

    source: str
    """Where the tasks live. What loads today: ``"builtin:mini"`` (the small pool bundled with ``t1_tasks``)
    or a directory of task bundles in Harbor layout (subdirectories holding ``task.toml``); a relative
    directory resolves against the current working directory, not against the recipe file. Named pools such
    as ``"T1-15k"`` or ``"TMax-15k"`` (T1 §3.1) are declared by the cluster recipes but are not resolvable
    yet: no name-to-directory mapping is built, so give the pool's local directory instead. Nothing is
    downloaded at run time."""

    order: Literal["as_listed", "quality_rank"] = "as_listed"
    """How the pool is materialised on disk: ``as_listed`` (no meaningful order) or ``quality_rank`` (best
    audit score first, as T1-15k is, T1 §3.1). A ``quality_rank`` pool must be shuffled per epoch
    (T1 §5.4)."""

    shuffle: Literal["per_epoch", "none"] = "per_epoch"
    """``per_epoch``: a fresh seeded permutation of the pool at every epoch, so per-batch reward statistics
    stay stationary instead of drifting with task quality (T1 §3, §5.4). ``none``: the listed order (tests
    only)."""

    shuffle_seed: int = 0
    """Seed of the per-epoch permutation (epoch e uses a permutation derived from ``(shuffle_seed, e)``)."""

    category_mix: dict[str, float] | None = None
    """Target share of each task category (fractions in [0, 1] summing to 1), e.g. ``{"scripting": 0.179,
    ...}`` (T1 §3.1, Fig. 3). Re-weighting the pool by category is not built yet, so any mix is refused;
    ``None`` (the only value accepted) keeps the pool's own composition."""

    limit: int | None = Field(default=None, gt=0)
    """Use only the first ``limit`` tasks (tasks), after ordering, before shuffling); ``None`` uses the whole
    pool."""

    tasks: list[str] | None = None
    """Use only these task ids (a named split of the pool, e.g. the tasks a warm-started policy sometimes
    solves) for training, `t1 sft` and `t1 eval`, kept in the pool's stored order; an id the pool does not
    hold is refused by name. ``None`` uses every task. Exclusive with ``limit``."""

    audit: PoolAuditSpec | None = None
    """Require an audit of the pool (``t1 tasks audit``) and train only on the tasks it admits; ``None``
    trains on every task of the pool (T1 §3.2 audits T1-15k before any training)."""

    validation: str | None = None
    """The record that ``t1 tasks validate POOL --record FILE`` wrote for this pool (a path), or ``None``.
    With it, each trial's verifier report is held to the count of assertions the task's own verifier
    reported for the reference solution: a report naming more is refused as tampered, and assertions it
    leaves out count as failed, so deleting failing entries cannot raise the binary or ratio reward (T1
    §5.2). Without it, reports are held to the static count of the task's tests (an upper bound), and left
    out assertions are not added. A record of another pool is refused."""

    max_eval_overlap: float = Field(default=0.8, gt=0, le=1)
    """Largest Jaccard similarity (fraction, over word 5-grams) that a training task may have with any task of
    the evaluation pools (``evaluation.suites``); instruction and tests are compared apart and the closer part
    decides, by its exact Jaccard (MinHash only finds candidates, in ``t1 tasks overlap``). ``t1 train``
    refuses a pool with a closer pair. The paper's pool is out of distribution by construction (T1 §3); 0.8,
    chosen (a common near-duplicate threshold)."""

    @model_validator(mode="after")
    def _check(self) -> PoolSpec:
        raise_if(pool_violations(self))
        return self


def pool_violations(p: PoolSpec) -> list[Violation]:
    """Rules of ``PoolSpec`` (field paths relative to the pool section)."""
    v: list[Violation] = []
    if not p.source.strip():
        v.append(
            Violation(
                "pool.source_empty",
                "source",
                "source is empty: give 'builtin:mini', a directory of task bundles or a named pool",
            )
        )
    if p.tasks is not None:
        if not p.tasks:
            v.append(Violation("pool.tasks_empty", "tasks", "tasks is empty: list task ids, or null for all"))
        dupes = sorted({t for t in p.tasks if p.tasks.count(t) > 1})
        if dupes:
            v.append(Violation("pool.tasks_duplicate", "tasks", f"tasks lists {dupes} more than once"))
        if p.limit is not None:
            v.append(
                Violation(
                    "pool.tasks_and_limit",
                    "tasks",
                    "tasks and limit both cut the pool: give one (tasks names the split, limit takes the "
                    "first N)",
                )
            )
    if p.order == "quality_rank" and p.shuffle != "per_epoch":
        v.append(
            Violation(
                "pool.quality_rank_needs_shuffle",
                "shuffle",
                "a quality_rank pool without per-epoch shuffling feeds the best tasks first and the "
                "reward drifts with task quality (T1 §5.4): set shuffle: per_epoch",
            )
        )
    if p.category_mix is not None:
        v.append(
            Violation(
                "pool.category_mix_not_built",
                "category_mix",
                "re-weighting the pool by category is not built yet, so the pool's own composition would be "
                "used whatever the mix: set it to null",
            )
        )
        bad = {k: x for k, x in p.category_mix.items() if not 0.0 <= x <= 1.0}
        if bad:
            v.append(
                Violation(
                    "pool.category_mix_range",
                    "category_mix",
                    f"category shares must lie in [0, 1]; got {bad}",
                )
            )
        total = sum(p.category_mix.values())
        if not p.category_mix or not math.isclose(total, 1.0, abs_tol=1e-3):
            v.append(
                Violation(
                    "pool.category_mix_sum",
                    "category_mix",
                    f"category shares sum to {total:.4f}, not 1: rescale them or remove category_mix",
                )
            )
    return v
