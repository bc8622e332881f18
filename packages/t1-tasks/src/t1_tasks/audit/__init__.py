"""The task audit: eight weighted dimensions, critical minimums and hard rejects (T1 §3.2, Fig. 4).

Two sources of judgement fill one row per task: static and executed checks that need no model
(``static``: test leakage, solution shortcuts, weak verifiers from a validation record, hidden-requirement
candidates) and an LLM judge through any OpenAI-compatible endpoint (``judge``: the rubric as the versioned
prompt ``prompts/rubric-v1.md``, a JSON answer validated by pydantic). ``rubric`` holds the weights, the
QualityScore and the minimums; ``rows`` the audit file; ``pool_audit`` audits a pool and filters one by a
recipe's ``pool.audit`` section (:func:`admitted_tasks`). ``t1 tasks audit`` is the command line.
"""

from t1_tasks.audit.judge import (
    RUBRIC_VERSION,
    JudgeAnswer,
    JudgeConfig,
    JudgeConfigError,
    JudgeFailure,
    JudgeVerdict,
    judge_task,
)
from t1_tasks.audit.pool_audit import admitted_tasks, audit_pool, audit_task
from t1_tasks.audit.rows import (
    AUDIT_VERSION,
    AuditFileError,
    AuditRow,
    read_audit,
    rejection_reasons,
    write_audit,
)
from t1_tasks.audit.rubric import (
    DIMENSION_NAMES,
    DIMENSIONS,
    HARD_REJECTS,
    Dimension,
    critical_failures,
    quality_score,
    weighted_contributions,
)
from t1_tasks.audit.static import Finding, StaticAudit, static_audit

__all__ = [
    "AUDIT_VERSION",
    "DIMENSIONS",
    "DIMENSION_NAMES",
    "HARD_REJECTS",
    "RUBRIC_VERSION",
    "AuditFileError",
    "AuditRow",
    "Dimension",
    "Finding",
    "JudgeAnswer",
    "JudgeConfig",
    "JudgeConfigError",
    "JudgeFailure",
    "JudgeVerdict",
    "StaticAudit",
    "admitted_tasks",
    "audit_pool",
    "audit_task",
    "critical_failures",
    "judge_task",
    "quality_score",
    "read_audit",
    "rejection_reasons",
    "static_audit",
    "weighted_contributions",
    "write_audit",
]
