"""Audit a pool (static checks, optionally the judge) and filter a pool by an audit file (T1 §3.2).

:func:`audit_task` merges the two sources of judgement into one :class:`AuditRow`: the static checks'
scores and hard rejects (``t1_tasks.audit.static``) and, when asked, the judge's eight scores and four flags
(``t1_tasks.audit.judge``). Where both scored a dimension the lower score is kept, with its source. A judge
failure leaves the judge's dimensions unscored and keeps the task out (it was not audited as asked).

:func:`admitted_tasks` is what a run applies for a recipe's ``pool.audit`` (``PoolAuditSpec``): the tasks
the audit file admits under ``min_score``; a task of the pool that the file does not list refuses the run.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from t1_spec import PoolAuditSpec
from t1_tasks.audit.judge import RUBRIC_VERSION, JudgeConfig, JudgeFailure, judge_task
from t1_tasks.audit.rows import (
    AuditFileError,
    AuditRow,
    DimensionScore,
    HardReject,
    read_audit,
    rejection_reasons,
)
from t1_tasks.audit.rubric import DIMENSIONS, critical_failures, quality_score
from t1_tasks.audit.static import static_audit
from t1_tasks.pool import Pool
from t1_tasks.task import Task, bundle_digest
from t1_tasks.validation import ValidationRecord

__all__ = ["admitted_tasks", "audit_pool", "audit_task"]

_WEIGHT = {d.name: d.weight for d in DIMENSIONS}


def audit_task(
    task: Task,
    *,
    record: ValidationRecord | None = None,
    judge: JudgeConfig | None = None,
    min_score: float = 3.0,
    sleep: Callable[[float], None] | None = None,
) -> AuditRow:
    """Audit one task: static checks, then the judge when ``judge`` is given (T1 §3.2, Fig. 4).

    Args:
        task: the task.
        record: a validation record (``t1 tasks validate --record``); its row for the task feeds the
            weak-verifier, correctness and coverage checks. A record without the task skips those checks.
        judge: the judge's endpoint and model, or None for a static audit only.
        min_score: the lowest QualityScore admitted (1-5).
        sleep: the judge's backoff sleep (tests pass a no-op); None sleeps.

    Returns:
        The task's ``AuditRow``.
    """
    static = static_audit(task, record.get(task.id) if record is not None else None)
    scores = {
        name: DimensionScore(score=s, source="static", evidence=tuple(static.evidence(name)))
        for name, s in static.scores.items()
    }
    rejects: dict[str, list[HardReject]] = {
        name: [HardReject(source="static", evidence=e) for e in ev]
        for name, ev in static.hard_rejects.items()
    }
    notes: list[str] = []
    if record is not None and record.get(task.id) is None:
        notes.append("the validation record has no row for this task: the executed checks did not run")
    judge_fields: dict[str, object] = {}
    if judge is not None:
        verdict = judge_task(task, judge, **({"sleep": sleep} if sleep is not None else {}))
        judge_fields = {"judge_model": verdict.model, "judge_attempts": verdict.attempts}
        if isinstance(verdict, JudgeFailure):
            judge_fields["judge_failure"] = verdict.error
        else:
            judge_fields["judge_rationale"] = verdict.answer.rationale
            for name, s in verdict.answer.scores.model_dump().items():
                if name not in scores or s <= scores[name].score:
                    scores[name] = DimensionScore(score=s, source="judge")
            for name, flagged in verdict.answer.hard_rejects.model_dump().items():
                if flagged:
                    rejects.setdefault(name, []).append(
                        HardReject(source="judge", evidence="flagged by the judge (see judge_rationale)")
                    )
    values = {k: v.score for k, v in scores.items()}
    if not values:
        notes.append("no dimension scored: admitted on the hard rejects alone (give --validated or --judge)")
    fields = {
        "task_id": task.id,
        "bundle_sha256": bundle_digest(task.path),
        "rubric_version": RUBRIC_VERSION,
        "scores": {d.name: scores[d.name] for d in DIMENSIONS if d.name in scores},
        "quality_score": quality_score(values),
        "quality_partial": len(values) < len(DIMENSIONS),
        "scored_weight": round(sum(_WEIGHT[k] for k in values), 6),
        "critical_failures": critical_failures(values),
        "hard_rejects": {k: tuple(v) for k, v in rejects.items()},
        "min_score": min_score,
        "notes": tuple(notes),
        **judge_fields,
    }
    draft = AuditRow(admitted=False, **fields)  # type: ignore[arg-type]
    reasons = rejection_reasons(draft, min_score)
    return draft.model_copy(update={"admitted": not reasons, "reasons": tuple(reasons)})


def audit_pool(
    pool: Pool,
    *,
    record: ValidationRecord | None = None,
    judge: JudgeConfig | None = None,
    min_score: float = 3.0,
    on_row: Callable[[AuditRow], None] | None = None,
    sleep: Callable[[float], None] | None = None,
) -> list[AuditRow]:
    """Audit every task of ``pool`` in stored order (:func:`audit_task` for each).

    Args:
        pool: the pool.
        record: a validation record of the pool, or None.
        judge: the judge's configuration, or None for a static audit only.
        min_score: the lowest QualityScore admitted.
        on_row: called with each row as it is made (progress).
        sleep: the judge's backoff sleep; None sleeps.

    Returns:
        One row per task, in pool order.
    """
    rows = []
    for task in pool.tasks:
        row = audit_task(task, record=record, judge=judge, min_score=min_score, sleep=sleep)
        rows.append(row)
        if on_row is not None:
            on_row(row)
    return rows


def admitted_tasks(pool: Pool, spec: PoolAuditSpec) -> Pool:
    """The pool restricted to the tasks its audit admits (a recipe's ``pool.audit``; T1 §3.2).

    A task is left out when it is hard-rejected, had a judge failure, is below a critical minimum, or has a
    QualityScore below ``spec.min_score`` (``rejection_reasons``; the row's own ``admitted`` is not trusted,
    since it was taken under the audit's ``--min-score``). Stored order is kept.

    Args:
        pool: the loaded pool.
        spec: the recipe's audit section (``file``, ``min_score``).

    Returns:
        A ``Pool`` with the admitted tasks (possibly none) and the same ``source`` and ``broken``.

    Raises:
        AuditFileError: the file cannot be read, or a task of the pool has no row in it (names the task and
            the file: audit the pool again).
    """
    rows = read_audit(spec.file)
    missing = [t.id for t in pool.tasks if t.id not in rows]
    if missing:
        tasks = f"task{'s' * (len(missing) > 1)} {', '.join(missing)}"
        raise AuditFileError(
            f"audit file {Path(spec.file)}: no row for {tasks} of pool {pool.source}; audit the pool again "
            f"with `t1 tasks audit {pool.source} --out {spec.file}`"
        )
    changed = [t.id for t in pool.tasks if rows[t.id].bundle_sha256 != bundle_digest(t.path)]
    if changed:
        tasks = f"task{'s' * (len(changed) > 1)} {', '.join(changed)}"
        raise AuditFileError(
            f"audit file {Path(spec.file)}: {tasks} of pool {pool.source} changed since the audit (bundle "
            f"digest differs); audit the pool again with `t1 tasks audit {pool.source} --out {spec.file}`"
        )
    kept = tuple(t for t in pool.tasks if not rejection_reasons(rows[t.id], spec.min_score))
    return Pool(source=pool.source, tasks=kept, broken=pool.broken)
