"""The validation record: what ``t1 tasks validate --record FILE`` observed, as one versioned JSON file.

Per task it keeps the verdict, whether the task's verifier writes a per-assertion report and how many
assertions it reports (``per_assertion_report``, ``assertions``), the reference solution's (oracle's) and
the do-nothing agent's observed assertion counts (passed, total), whether each run's verifier wrote a
per-assertion report (CTRF or JUnit) or fell back to ``reward.txt`` / ``reward.json``, the sandbox's network
policy, the oracle's solve time, the verifier's runtime and the cause of any failure; for the pool, its
source, when it was validated and by which T1 version.

Tools read it later: ``t1 tasks stats --validated FILE`` (observed counts, runtimes, the per-assertion
report fraction; T1 §3.1 found 93% in a pre-flight), the audit (the do-nothing result is its weak-verifier
evidence, T1 §3.2), and training reads which tasks emit per-assertion reports (T1 §5.2: the dense reward
needs one) and whether the oracle's verifier could run on this machine (``t1_rollout.attribution``).

The file is the JSON of :class:`ValidationRecord`, whose ``version`` field is :data:`RECORD_VERSION`;
:func:`read_record` refuses any other version by name before reading the rest.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = [
    "RECORD_VERSION",
    "VERIFIER_TIMEOUT_ERROR",
    "CheckRecord",
    "TaskRecord",
    "ValidationRecord",
    "ValidationRecordError",
    "read_record",
    "record_for",
    "write_record",
]

RECORD_VERSION = "t1-validation/v1"
"""The record format this T1 writes and reads."""

PER_ASSERTION_SOURCES = ("ctrf", "junit")
"""``report_source`` values of a per-assertion report (``t1_reward.Report.source``)."""

VERIFIER_TIMEOUT_ERROR = "verifier timed out"
"""How a check's ``error`` opens when its verifier ran past ``[verifier] timeout_sec``
(``t1_rollout.validate`` writes it; training reads it: a task whose own verifier hangs)."""


class ValidationRecordError(ValueError):
    """A validation record that cannot be read: unreadable file, not JSON, wrong version or bad fields."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CheckRecord(_Model):
    """One check of one task: the oracle (reference solution, then verifier) or do-nothing (verifier only)."""

    passed: int = Field(ge=0)
    """P: assertions that passed in the verifier's report."""

    total: int = Field(ge=0)
    """T: assertions the verifier reported (0 when it did not run or wrote no per-assertion report)."""

    report_source: str | None
    """Where the counts came from: ``"ctrf"`` or ``"junit"`` (a per-assertion report), ``"reward.json"``,
    ``"reward.txt"`` or ``"none"`` (fell back to the binary outcome, or nothing); None when the verifier did
    not run (build or solution failure)."""

    solve_s: float | None = None
    """Wall seconds of ``solution/solve.sh`` (oracle only); None for do-nothing or when it did not run."""

    verifier_s: float | None = None
    """Wall seconds of the verifier run (upload, ``tests/test.sh``, download); None when it did not run."""

    duration_s: float = Field(ge=0)
    """Wall seconds of the whole check, sandbox creation to reclamation (build included)."""

    error: str | None = None
    """The infrastructure failure of this check (build, solution, verifier crash or timeout, no usable
    report), or None."""

    failed_assertions: tuple[str, ...] = ()
    """Names of the reported assertions that did not pass."""

    network: bool | None = None
    """The sandbox's network policy during this check (``True`` network, ``False`` none); None when the
    backend did not say or the record predates the field. Training uses the record's verdict on the
    environment only under the same policy."""

    build_network: bool | None = None
    """Whether the image this check ran was built with network (``True``: Docker's ``sandbox.build_network``,
    or an image reused from such a build; ``False``: without); None when the backend does not build, the
    image does not say, or the record predates the field. The check's own network is ``network``."""

    @property
    def per_assertion_report(self) -> bool:
        """The verifier wrote a usable per-assertion report (CTRF or JUnit)."""
        return self.report_source in PER_ASSERTION_SOURCES

    @property
    def verifier_timed_out(self) -> bool:
        """The check's verifier ran past its deadline (its ``error`` opens with `VERIFIER_TIMEOUT_ERROR`)."""
        return self.error is not None and self.error.startswith(VERIFIER_TIMEOUT_ERROR)


class TaskRecord(_Model):
    """The validation of one task (or one broken bundle that could not be validated)."""

    id: str
    """The task's id (its bundle directory name)."""

    verdict: Literal["ok", "unproven", "failed", "broken"]
    """``ok``: the oracle passes every assertion and do-nothing fails one; ``unproven``: the bundle has no
    ``solution/`` (Harbor allows it), so no oracle ran (``oracle`` is None) and nothing shows the task can
    be solved, while the do-nothing check found nothing wrong; ``failed``: a check failed (see
    ``problems``; also with no oracle); ``broken``: the bundle did not load, nothing ran. Failure
    attribution takes a row without an oracle as no proof that the verifier reports here
    (``oracle_reported`` None) and any verdict but ``ok`` as a task whose verifier timeout is not the
    agent's doing (``t1_rollout.attribution``)."""

    problems: tuple[str, ...] = ()
    """The cause of a ``failed`` or ``broken`` verdict, one sentence each (empty for ``ok``)."""

    category: str | None = None
    """``[metadata] category`` (None for a broken bundle)."""

    difficulty: str | None = None
    """``[metadata] difficulty`` (None for a broken bundle)."""

    static_assertions: int | None = None
    """Assertions counted statically from ``tests/*.py`` (``Task.n_assertions``); None when unknown."""

    oracle: CheckRecord | None = None
    """The reference-solution check; None for a broken bundle or one without ``solution/`` (not run)."""

    nop: CheckRecord | None = None
    """The do-nothing check (the verifier straight after the build); None for a broken bundle."""

    per_assertion_report: bool | None = None
    """Whether the task's verifier writes a per-assertion report (CTRF or JUnit): its oracle's run wrote one,
    or its ``tests/test.sh`` asks pytest for one (``--ctrf``, ``--junitxml``) even though none came out here.
    Training then treats a run without one as a verifier failure, never as the binary fallback (T1 §5.2).
    None for a broken bundle or a record that predates the field."""

    assertions: int | None = None
    """How many assertions the task's verifier reports: the oracle's observed count when it wrote a
    per-assertion report, else the static count (``static_assertions``); None when neither is known."""

    @property
    def oracle_reported(self) -> bool | None:
        """Whether the oracle's verifier wrote a usable per-assertion report on the validating machine.

        None when its verifier did not run (build or solution failure), the bundle has no ``solution/``
        (no oracle ran) or the task is broken.
        """
        if self.oracle is None or self.oracle.report_source is None:
            return None
        return self.oracle.per_assertion_report

    @property
    def observed_assertions(self) -> int | None:
        """The oracle's reported assertion count when its verifier wrote a per-assertion report, else None."""
        if self.oracle is None or not self.oracle.per_assertion_report:
            return None
        return self.oracle.total


class ValidationRecord(_Model):
    """What one ``t1 tasks validate`` run observed over a pool (the file ``--record`` writes)."""

    version: Literal["t1-validation/v1"] = RECORD_VERSION
    """Record format; :func:`read_record` refuses any other."""

    pool: str
    """The pool source as given (``builtin:mini`` or a directory)."""

    created: datetime
    """When the validation finished (timezone-aware, UTC)."""

    t1_version: str
    """Version of the T1 that validated the pool."""

    duration_s: float = Field(ge=0)
    """Wall seconds of the whole validation."""

    tasks: tuple[TaskRecord, ...]
    """One row per task and per broken bundle, sorted by id (the pool's stored order)."""

    def get(self, task_id: str) -> TaskRecord | None:
        """The row of ``task_id``, or None when the record holds none."""
        return next((t for t in self.tasks if t.id == task_id), None)

    @property
    def ok(self) -> bool:
        """Every task's verdict is ``ok``."""
        return all(t.verdict == "ok" for t in self.tasks)


def write_record(record: ValidationRecord, path: str | Path) -> Path:
    """Write ``record`` as indented JSON to ``path`` (parent folders created).

    Raises:
        ValidationRecordError: the file cannot be written (names the path).
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(record.model_dump_json(indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise ValidationRecordError(f"validation record {path}: cannot write: {exc.strerror or exc}") from exc
    return path


def read_record(path: str | Path) -> ValidationRecord:
    """Read a validation record written by :func:`write_record` (``t1 tasks validate --record``).

    Raises:
        ValidationRecordError: the file is unreadable or not JSON, its ``version`` is not
            :data:`RECORD_VERSION` (named in the message), or a field is wrong (field path named).
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValidationRecordError(f"validation record {path}: cannot read: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise ValidationRecordError(f"validation record {path}: not JSON: {exc}") from exc
    version = data.get("version") if isinstance(data, dict) else None
    if version != RECORD_VERSION:
        raise ValidationRecordError(
            f"validation record {path}: version {version!r} is not supported (this T1 reads "
            f"{RECORD_VERSION}); write a new record with `t1 tasks validate --record FILE`"
        )
    try:
        return ValidationRecord.model_validate(data)
    except ValidationError as exc:
        fields = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(top)'}: {e['msg']}" for e in exc.errors())
        raise ValidationRecordError(f"validation record {path}: {fields}") from exc


def _same_source(a: str, b: str) -> bool:
    if a.startswith("builtin:") or b.startswith("builtin:"):
        return a == b
    return Path(a).resolve() == Path(b).resolve()


def record_for(record: ValidationRecord, source: str, task_ids: list[str]) -> ValidationRecord:
    """``record`` when it was taken on the pool ``source``, whose tasks are ``task_ids``.

    A record of another pool would feed another pool's executed checks (a do-nothing agent that failed there)
    to this one's audit and statistics, and skip the checks silently; it is refused instead.

    Raises:
        ValidationRecordError: the record names another pool, or holds none of the pool's tasks.
    """
    if not _same_source(record.pool, source):
        raise ValidationRecordError(
            f"validation record of pool {record.pool!r} given for pool {source!r}: validate this pool with "
            f"`t1 tasks validate {source} --record FILE`"
        )
    if task_ids and not any(record.get(t) is not None for t in task_ids):
        raise ValidationRecordError(
            f"validation record of pool {record.pool!r} holds none of its {len(task_ids)} tasks: validate it "
            "again with `t1 tasks validate ... --record FILE`"
        )
    return record
