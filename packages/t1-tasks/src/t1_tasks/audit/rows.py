"""One audit row per task, its admission verdict, and the audit file (JSONL) that a run reads (T1 §3.2).

A row holds the scored dimensions, each with its source (``static`` or ``judge``) and evidence, the
QualityScore over what was scored (``quality_partial`` when fewer than eight dimensions were, with the weight
they cover in ``scored_weight``), the critical-minimum failures, the hard rejects with their evidence, the
judge's rationale or failure, and the admission verdict under ``min_score``.

Admission (:func:`rejection_reasons`): a task is admitted when it has no hard reject, no judge failure, no
scored dimension below its critical minimum, and a QualityScore of at least ``min_score``. A row with no
dimension scored at all (a static audit without a validation record or the judge) has no QualityScore: it is
admitted on the hard rejects alone, and its row says so in ``notes``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from t1_tasks.audit.rubric import DIMENSION_NAMES, DIMENSIONS

__all__ = [
    "AUDIT_VERSION",
    "AuditFileError",
    "AuditRow",
    "DimensionScore",
    "HardReject",
    "read_audit",
    "rejection_reasons",
    "write_audit",
]

AUDIT_VERSION = "t1-audit/v1"
"""The row format this T1 writes and reads."""


class AuditFileError(ValueError):
    """An audit file that cannot be read, or that lacks a task a run needs (names the file and the task)."""


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DimensionScore(_Row):
    """One scored dimension of one task."""

    score: int = Field(ge=1, le=5)
    """The score, 1-5."""

    source: Literal["static", "judge"]
    """Who set it: a static check (``t1_tasks.audit.static``) or the judge; when both scored it, the lower
    score is kept and its source named."""

    evidence: tuple[str, ...] = ()
    """What the static checks found (file and line); empty for a judge score (the rationale is per task)."""


class HardReject(_Row):
    """One hard reject of one task (T1 §3.2)."""

    source: Literal["static", "judge"]
    """Who raised it."""

    evidence: str
    """What was found and where, or the judge's flag."""


class AuditRow(_Row):
    """The audit of one task: one line of the audit file."""

    version: Literal["t1-audit/v1"] = AUDIT_VERSION
    """Row format."""

    task_id: str
    """The task's id (its bundle directory name)."""

    bundle_sha256: str
    """`t1_tasks.bundle_digest` of the bundle as audited: a task edited after its audit no longer matches, and
    a run refuses the row (the audit must be taken again)."""

    rubric_version: str
    """The rubric the scores follow (the judge's prompt file, ``rubric-v1``)."""

    scores: dict[str, DimensionScore]
    """Dimension name -> its score; dimensions nobody scored are absent."""

    quality_score: float | None
    """The QualityScore over the scored dimensions (1-5), or None when none was scored."""

    quality_partial: bool
    """Fewer than the eight dimensions were scored (the score is the weighted mean over those that were)."""

    scored_weight: float = Field(ge=0, le=1)
    """Sum of the weights of the scored dimensions (1.0 when all eight were)."""

    critical_failures: dict[str, int]
    """Scored dimensions below their critical minimum -> their score."""

    hard_rejects: dict[str, tuple[HardReject, ...]]
    """Hard reject name -> the evidence for it (empty when none)."""

    judge_model: str | None = None
    """The judge's model, or None when the judge was not asked."""

    judge_attempts: int = 0
    """Requests made to the judge for this task."""

    judge_rationale: str | None = None
    """The judge's rationale, or None."""

    judge_failure: str | None = None
    """Why the judge gave no valid answer after every attempt (its scores are then absent), or None."""

    min_score: float
    """The ``--min-score`` the verdict below was taken under."""

    admitted: bool
    """The task passes the audit under ``min_score`` (:func:`rejection_reasons` is empty)."""

    reasons: tuple[str, ...] = ()
    """Why it is not admitted, one sentence each."""

    notes: tuple[str, ...] = ()
    """What the verdict rests on when it is weaker than a full audit (no dimension scored, ...)."""

    def score_values(self) -> dict[str, int]:
        """Dimension -> score, without sources."""
        return {k: v.score for k, v in self.scores.items()}


def rejection_reasons(row: AuditRow, min_score: float) -> list[str]:
    """Why ``row``'s task is not admitted under ``min_score`` (empty: admitted).

    Args:
        row: an audit row.
        min_score: the lowest QualityScore admitted (``PoolAuditSpec.min_score``).

    Returns:
        One sentence per reason: each hard reject, the judge failure, each critical-minimum failure, a
        QualityScore below ``min_score``.
    """
    out = [
        f"hard reject {name}: " + "; ".join(f"[{r.source}] {r.evidence}" for r in rejects)
        for name, rejects in row.hard_rejects.items()
        if rejects
    ]
    if row.judge_failure:
        out.append(f"judge failure (not scored): {row.judge_failure}")
    mins = {d.name: d.critical_min for d in DIMENSIONS}
    for name, score in row.critical_failures.items():
        dim = row.scores.get(name)
        why = f" ([{dim.source}] {'; '.join(dim.evidence)})" if dim is not None and dim.evidence else ""
        out.append(f"{name} {score} is below its critical minimum {mins.get(name)}{why}")
    if row.quality_score is not None and row.quality_score < min_score:
        partial = " (partial)" if row.quality_partial else ""
        out.append(f"QualityScore {row.quality_score:.2f}{partial} is below the minimum {min_score:g}")
    return out


def write_audit(rows: list[AuditRow], path: str | Path) -> Path:
    """Write ``rows`` as JSONL (one row per line, pool order) to ``path`` (parent folders created).

    Raises:
        AuditFileError: the file cannot be written (names it).
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(r.model_dump_json() + "\n" for r in rows), encoding="utf-8")
    except OSError as exc:
        raise AuditFileError(f"audit file {path}: cannot write: {exc.strerror or exc}") from exc
    return path


def read_audit(path: str | Path) -> dict[str, AuditRow]:
    """Read an audit file written by ``t1 tasks audit --out FILE``.

    Returns:
        Task id -> its row (a task audited twice keeps its last row).

    Raises:
        AuditFileError: unreadable file, a line that is not JSON, a row of another version, or a bad field
            (names the file, the line and the field).
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise AuditFileError(f"audit file {path}: cannot read: {exc.strerror or exc}") from exc
    rows: dict[str, AuditRow] = {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise AuditFileError(f"audit file {path}:{n}: not JSON: {exc.msg}") from exc
        version = data.get("version") if isinstance(data, dict) else None
        if version != AUDIT_VERSION:
            raise AuditFileError(
                f"audit file {path}:{n}: row version {version!r} is not supported (this T1 reads "
                f"{AUDIT_VERSION}); audit the pool again with `t1 tasks audit --out FILE`"
            )
        try:
            row = AuditRow.model_validate(data)
        except ValidationError as exc:
            raise AuditFileError(f"audit file {path}:{n}: {exc}") from exc
        unknown = sorted(set(row.scores) - set(DIMENSION_NAMES))
        if unknown:
            raise AuditFileError(f"audit file {path}:{n}: unknown dimensions {unknown}")
        rows[row.task_id] = row
    return rows
