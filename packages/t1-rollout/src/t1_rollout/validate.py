"""Pool validation: every reference solution passes every assertion; a do-nothing agent does not.

Behind ``t1 tasks validate``; T1 §3 (task audit: a verifier that the empty trajectory satisfies rewards
nothing the agent did, so it is reported as weak).

Deadlines here are the task's own: ``solution/solve.sh`` runs under ``task.toml``'s ``[agent] timeout_sec``
and the verifier under ``[verifier] timeout_sec`` (``Task.agent_timeout_s``, ``Task.verifier_timeout_s``).
This is the only place they apply; training uses the recipe's ``rollout.agent_deadline_s`` and
``rollout.verifier_deadline_s`` for every task. Sandbox limits are the ``sandbox_factory``'s (``t1 tasks
validate``: the defaults of ``LocalSandboxSpec``); ``task.toml``'s ``[environment]`` is not used. Broken
bundles never reach this module: ``load_pool(..., strict=False)`` lists them in ``Pool.broken`` and the CLI
reports them.

A bundle without ``solution/`` is not broken (Harbor allows it): its oracle check is not run (`NO_SOLUTION`),
its do-nothing check is, and its verdict is ``unproven`` at best (``TaskValidation.verdict``), recorded with
no oracle row. ``t1 tasks validate`` and ``tools/check_tasks.py`` both take this rule from `validate_task`.

The expected number of assertions is ``Task.n_assertions``, counted statically from ``tests/*.py`` (test
functions and ``Test*`` methods times literal ``parametrize`` cases). When it is unknown (None: parametrize
over a non-literal, fixture params, ...), the verifier's report is trusted for the count; the oracle must
still pass every reported assertion and the do-nothing agent fail at least one.

A verifier run that wrote no per-assertion report is an infrastructure failure with its cause: the hosts
``tests/test.sh`` fetches from when the sandbox has no network (``attribution.network_cause``), else what
the run's own output says it could not reach (``unreached.unreached_cause``: ``uv: no network to pypi.org``,
a TLS certificate the image does not trust). No agent runs in these sandboxes, so their output is evidence
here, as it never is in training.
"""

from __future__ import annotations

import asyncio
import datetime
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from t1_reward import FallbackCause, Report, parse_pytest_summary, read_report
from t1_reward.no_run import no_run_cause
from t1_reward.report import captured_output
from t1_rollout.attribution import declares_per_assertion, network_cause
from t1_rollout.verify import VerifierRun, run_verifier, sandbox_network
from t1_sandbox.base import ExecResult, Sandbox, SandboxError
from t1_sandbox.unreached import unreached_cause
from t1_tasks import Pool, Task, format_seconds
from t1_tasks.validation import (
    PER_ASSERTION_SOURCES,
    VERIFIER_TIMEOUT_ERROR,
    CheckRecord,
    TaskRecord,
    ValidationRecord,
)
from t1_tasks.verifier_needs import read_verifier_needs

__all__ = [
    "CheckResult",
    "SandboxLedger",
    "TaskValidation",
    "PoolValidation",
    "run_check",
    "validate_task",
    "validate_pool",
    "validation_record",
    "SOLUTION_DIR",
    "NO_SOLUTION",
    "short_cause",
]

SOLUTION_DIR = "/solution"
BUILD_TIMEOUT_S = 300.0
_TAIL_CHARS = 300  # characters of a script's output quoted in a verdict
NO_SOLUTION = "not run (no solution/)"
"""The oracle check of a bundle without ``solution/solve.sh`` (Harbor allows one): only do-nothing runs."""


@dataclass(frozen=True)
class CheckResult:
    """One check of one task (``oracle`` or ``nop``).

    Attributes:
        kind: ``"oracle"`` (reference solution then verifier) or ``"nop"`` (verifier straight after the
            build).
        passed: assertions passed (P).
        total: assertions reported (T).
        expected_total: the task's statically counted assertions (``Task.n_assertions``); None when unknown,
            then ``total`` is trusted.
        error: an infrastructure failure (build, solution, verifier crash or timeout, missing report), or
            None.
        duration_s: wall seconds, sandbox creation to reclamation.
        failed_assertions: names of the assertions that did not pass.
        report_source: where the counts came from (``Report.source``): ``"ctrf"`` or ``"junit"`` for a
            per-assertion report, ``"reward.json"``, ``"reward.txt"`` or ``"none"`` when only a binary outcome
            or nothing was written; None when the verifier did not run (build or solution failure).
        solve_s: wall seconds of ``solution/solve.sh`` (oracle only; None for the do-nothing check or when it
            did not run).
        verifier_s: wall seconds of the verifier run (upload, ``tests/test.sh``, download); None when it did
            not run.
        network: the sandbox's network policy during the check (``VerifierRun.network``); None when the
            backend did not say or no sandbox was made.
        build_network: the image's build had network (``Sandbox.built_with_network``: Docker's
            ``sandbox.build_network``, or an image reused from such a build); None when unknown.
        verifier_ran: ``tests/test.sh`` ran and exited on its own (no T1-side failure, no deadline, no
            signal), so its output folder (``<work_dir>/<task>/<kind>/``) is there to be scored.
    """

    kind: str
    passed: int
    total: int
    expected_total: int | None
    error: str | None
    duration_s: float
    failed_assertions: tuple[str, ...] = ()
    report_source: str | None = None
    solve_s: float | None = None
    verifier_s: float | None = None
    network: bool | None = None
    verifier_ran: bool = False
    build_network: bool | None = None

    @property
    def per_assertion_report(self) -> bool:
        """The verifier wrote a usable per-assertion report (CTRF or JUnit), not only a reward file."""
        return self.report_source in PER_ASSERTION_SOURCES

    @property
    def count_matches(self) -> bool:
        """The report holds the expected number of assertions (any number > 0 when the count is unknown)."""
        return self.total == self.expected_total if self.expected_total is not None else self.total > 0

    @property
    def all_passed(self) -> bool:
        """Every expected assertion reported and passed, with no error."""
        return self.error is None and self.count_matches and self.passed == self.total


def _oracle_problems(oracle: CheckResult) -> list[str]:
    """Why the oracle check fails (empty when it passes every expected assertion)."""
    failed = ", ".join(oracle.failed_assertions)
    if oracle.error:
        return [f"oracle: {oracle.error}"]
    if not oracle.count_matches:
        where = (
            f"where tests/ define {oracle.expected_total}"
            if oracle.expected_total is not None
            else "(tests/ could not be counted statically)"
        )
        return [
            f"oracle: the verifier reported {oracle.total} assertions {where}"
            + (f" and {len(oracle.failed_assertions)} failed: {failed}" if failed else "")
        ]
    if not oracle.all_passed:
        return [f"oracle passes {oracle.passed}/{oracle.total} assertions (failed: {failed})"]
    return []


@dataclass(frozen=True)
class TaskValidation:
    """Both checks of one task and the verdict.

    Attributes:
        task_id: the task.
        oracle: the reference-solution check: must pass every assertion; None when the bundle has no
            ``solution/solve.sh`` (`NO_SOLUTION`): the task is then not proven solvable.
        nop: the do-nothing check: must fail at least one assertion (run with or without a solution).
    """

    task_id: str
    oracle: CheckResult | None
    nop: CheckResult

    @property
    def problems(self) -> list[str]:
        """Why the task is not valid (empty when it is): one sentence per problem.

        A missing oracle is no problem here (Harbor allows it); `verdict` says ``unproven`` for it.
        """
        nop = self.nop
        out = _oracle_problems(self.oracle) if self.oracle is not None else []
        if nop.error:
            out.append(f"do-nothing: {nop.error}")
        elif nop.all_passed:
            out.append("weak verifier: a do-nothing agent passes every assertion")
        return out

    @property
    def verdict(self) -> str:
        """``ok``, ``unproven`` or ``failed``: the record's verdict (``TaskRecord.verdict``).

        ``ok``: the oracle passes all and do-nothing fails some; ``unproven``: no ``solution/``, the
        do-nothing check found nothing wrong but nothing shows the task can be solved; ``failed``: `problems`.
        """
        if self.problems:
            return "failed"
        return "unproven" if self.oracle is None else "ok"

    @property
    def ok(self) -> bool:
        """The oracle passes everything and the do-nothing agent fails something (never without an oracle)."""
        return self.verdict == "ok"


def short_cause(text: str, lines: int = 3) -> str:
    """A failure cause cut for a table cell: its first line and its last ``lines`` lines, on one line.

    A failed build's error carries the whole build log; the table shows the step, exit code and the end of
    the log, the record keeps all of it.
    """
    rows = [" ".join(line.split()) for line in text.strip().splitlines() if line.strip()]
    if len(rows) <= lines + 1:
        return " | ".join(rows)
    return f"{rows[0]} | ... | " + " | ".join(rows[-lines:])


@dataclass
class SandboxLedger:
    """Sandboxes a validation created and closed, to tell after an interruption whether all were reclaimed.

    Attributes:
        opened: sandboxes created by the factory.
        closed: sandboxes whose ``close`` returned (processes killed, directories deleted).
    """

    opened: int = 0
    closed: int = 0

    @property
    def open_now(self) -> int:
        """Sandboxes created and not (yet) closed."""
        return self.opened - self.closed


@dataclass(frozen=True)
class PoolValidation:
    """Validation of a whole pool.

    Attributes:
        tasks: one ``TaskValidation`` per task, in pool order.
        duration_s: wall seconds for the whole pool.
    """

    tasks: tuple[TaskValidation, ...]
    duration_s: float = 0.0
    failed: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        """Every task is valid."""
        return all(t.ok for t in self.tasks)


def _tail(text: str) -> str:
    """The end of a script's output on one line (whitespace runs collapsed), at most ``_TAIL_CHARS``."""
    flat = " ".join(text.split())
    return flat if len(flat) <= _TAIL_CHARS else "..." + flat[-_TAIL_CHARS:]


def _said(output: str, who: str) -> str:
    """``"; its last output: ..."`` or ``"; it printed nothing"``: the end of a verdict sentence."""
    tail = _tail(output)
    return f"; {who} last output: {tail}" if tail else "; it printed nothing"


def _solve_failed(task: Task, solved: ExecResult) -> str:
    """Why ``solution/solve.sh`` failed, in one sentence (deadline or exit status, then its output)."""
    if solved.timed_out:
        why = f"timed out after {format_seconds(task.agent_timeout_s)} s (agent.timeout_sec in task.toml)"
    elif solved.exit_code is None:
        why = "was killed"
    else:
        why = f"exited {solved.exit_code}"
    return f"solution/solve.sh {why}" + _said(solved.stdout + solved.stderr, "its")


def _verifier_failed(task: Task, run: VerifierRun, report: Report) -> str | None:
    """Why the verifier gave no usable per-assertion report, in one sentence; None when it did."""
    if run.error:
        return run.error
    if run.timed_out:
        return (
            f"{VERIFIER_TIMEOUT_ERROR} after {format_seconds(task.verifier_timeout_s)} s "
            f"(verifier.timeout_sec in task.toml)" + _said(run.stdout_tail, "test.sh's")
        )
    if report.fallback is None:
        return None
    exited = f"tests/test.sh exited {run.exit_code}" if run.exit_code is not None else "tests/test.sh ended"
    if (not_run := _no_run(task, run, report)) is not None:
        exited = f"verifier: {not_run}: {exited}"
    if (reached := network_cause(task, run.network)) is not None:
        exited = f"{reached}: {exited}"
    elif (unreached := unreached_cause(run.stdout_tail)) is not None:
        # no agent ran in this sandbox, so what the verifier printed is evidence (never so in training)
        exited = f"verifier: {unreached}: {exited}"
    if report.fallback is FallbackCause.MISSING:
        what = "wrote no per-assertion report (ctrf.json or JUnit *.xml in /logs/verifier)"
    else:
        what = f"wrote a per-assertion report that cannot be used ({report.detail})"
    return f"{exited} and {what}" + _said(run.stdout_tail, "its")


def _no_run(task: Task, run: VerifierRun, report: Report) -> str | None:
    """The one rule of ``t1_reward.no_run`` (no pytest session; a dependency test.sh installs missing)."""
    return no_run_cause(
        report,
        captured_output(run.out_dir),
        expects_per_assertion=declares_per_assertion(task),
        verifier_proven=False,
        test_dependencies=read_verifier_needs(task.tests_dir).import_names,
    )


def _nop_failed_collection(task: Task, run: VerifierRun, report: Report) -> bool:
    """The do-nothing run's pytest session closed having run no test, and not for a missing dependency.

    The tests could not be collected because what the agent was to write is not there (``from solution
    import f``): the do-nothing agent fails, as it should; not an error of the check.
    """
    if run.crashed or run.timed_out or report.total > 0 or _no_run(task, run, report) is not None:
        return False
    stdout = captured_output(run.out_dir) or ""
    summary, unfinished = parse_pytest_summary(stdout)
    return summary is not None and not unfinished and "test session starts" in stdout


async def _check(
    task: Task, kind: str, sandbox_factory: Callable[[], Sandbox], work_dir: Path, ledger: SandboxLedger
) -> CheckResult:
    started = time.monotonic()
    out_dir = work_dir / task.id / kind
    run: VerifierRun | None = None
    error: str | None = None
    solve_s: float | None = None
    network: bool | None = None
    build_network: bool | None = None
    try:
        sandbox = sandbox_factory()
        network = sandbox_network(sandbox)
        ledger.opened += 1
        try:
            await sandbox.start(task.environment_dir, timeout_s=BUILD_TIMEOUT_S)
            build_network = getattr(sandbox, "built_with_network", None)
            if kind == "oracle":
                await sandbox.upload(task.solution_dir, SOLUTION_DIR, timeout_s=60)
                solve_started = time.monotonic()
                # as root where the backend can (Docker), as Harbor runs it: solutions install packages
                solved = await sandbox.exec_solution(
                    f"bash {SOLUTION_DIR}/solve.sh", timeout_s=task.agent_timeout_s
                )
                solve_s = time.monotonic() - solve_started
                if not solved.ok:
                    error = _solve_failed(task, solved)
            if error is None:
                run = await run_verifier(sandbox, task, timeout_s=task.verifier_timeout_s, out_dir=out_dir)
        finally:  # also on cancellation (Ctrl-C): counted only once close has returned
            await sandbox.close()
            ledger.closed += 1
    except (SandboxError, OSError) as exc:  # infrastructure: recorded for this task, the pool goes on
        error = f"{type(exc).__name__}: {exc}"
    if error is None and run is not None:
        report: Report = read_report(run.out_dir, timed_out=run.timed_out, crashed=run.crashed)
        failed = _verifier_failed(task, run, report)
        if failed is not None and kind == "nop" and _nop_failed_collection(task, run, report):
            failed = None
        return CheckResult(
            kind=kind,
            passed=report.passed,
            total=report.total,
            expected_total=task.n_assertions,
            error=failed,
            duration_s=time.monotonic() - started,
            failed_assertions=tuple(o.name for o in report.outcomes if o.status != "passed"),
            report_source=report.source,
            solve_s=solve_s,
            verifier_s=run.duration_s,
            network=run.network,
            verifier_ran=not (run.crashed or run.timed_out),
            build_network=build_network,
        )
    return CheckResult(
        kind,
        0,
        0,
        task.n_assertions,
        error,
        time.monotonic() - started,
        solve_s=solve_s,
        network=network,
        build_network=build_network,
    )


async def run_check(
    task: Task,
    kind: str,
    *,
    sandbox_factory: Callable[[], Sandbox],
    work_dir: Path,
    ledger: SandboxLedger | None = None,
) -> CheckResult:
    """Run one check of one task in a fresh sandbox: ``"oracle"`` (solution, then verifier) or ``"nop"``.

    `validate_task` runs both (only do-nothing for a bundle without ``solution/``); ``t1 eval --policy``
    runs one.

    Args:
        task: the task.
        kind: ``"oracle"`` or ``"nop"``.
        sandbox_factory: makes a fresh, unstarted sandbox.
        work_dir: host directory for the verifier outputs (``<work_dir>/<task>/<kind>/``).
        ledger: counts the sandboxes created and closed (a fresh one when None).

    Returns:
        The ``CheckResult``; infrastructure failures are recorded in it, not raised.

    Raises:
        ValueError: ``kind`` is neither ``"oracle"`` nor ``"nop"``, or ``"oracle"`` for a bundle without
            ``solution/solve.sh``.
    """
    if kind not in ("oracle", "nop"):
        raise ValueError(f"check kind must be 'oracle' or 'nop', got {kind!r}")
    if kind == "oracle" and not task.has_solution:
        raise ValueError(f"task {task.id}: no oracle check without {task.path / 'solution' / 'solve.sh'}")
    return await _check(
        task, kind, sandbox_factory, work_dir, ledger if ledger is not None else SandboxLedger()
    )


async def validate_task(
    task: Task,
    *,
    sandbox_factory: Callable[[], Sandbox],
    work_dir: Path,
    ledger: SandboxLedger | None = None,
) -> TaskValidation:
    """Run the oracle check and the do-nothing check of one task, each in a fresh sandbox.

    A bundle without ``solution/solve.sh`` (Harbor allows one) gets the do-nothing check alone; its oracle
    is None (`NO_SOLUTION`) and its verdict at best ``unproven``.

    Args:
        task: the task.
        sandbox_factory: makes a fresh, unstarted sandbox.
        work_dir: host directory for the verifier outputs (``<work_dir>/<task>/{oracle,nop}/``).
        ledger: counts the sandboxes created and closed (a fresh one when None).

    Returns:
        The ``TaskValidation``; infrastructure failures are recorded in it, not raised.
    """
    ledger = ledger if ledger is not None else SandboxLedger()
    oracle = await _check(task, "oracle", sandbox_factory, work_dir, ledger) if task.has_solution else None
    nop = await _check(task, "nop", sandbox_factory, work_dir, ledger)
    return TaskValidation(task_id=task.id, oracle=oracle, nop=nop)


async def validate_pool(
    pool: Pool,
    *,
    sandbox_factory: Callable[[], Sandbox],
    concurrency: int = 2,
    work_dir: Path | None = None,
    on_task_done: Callable[[TaskValidation], None] | None = None,
    ledger: SandboxLedger | None = None,
) -> PoolValidation:
    """Validate every task of ``pool`` (oracle passes all, do-nothing fails some), ``concurrency`` at once.

    Args:
        pool: the pool.
        sandbox_factory: makes a fresh, unstarted sandbox (one per check).
        concurrency: tasks validated at the same time (>= 1).
        work_dir: where verifier outputs are kept (created if missing; default: a temporary directory,
            deleted afterwards).
        on_task_done: called as each task finishes (progress display).
        ledger: counts the sandboxes created and closed; pass one to learn, after a cancellation (Ctrl-C),
            whether every sandbox was reclaimed (``ledger.open_now == 0``).

    Returns:
        The ``PoolValidation`` with tasks in pool order.

    Raises:
        ValueError: ``concurrency`` < 1, or ``work_dir`` is not a directory and cannot be created as one.
        asyncio.CancelledError: when cancelled; every sandbox is closed before it propagates.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if work_dir is not None:
        try:
            Path(work_dir).mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file in the way: fail once here, not once per check
            raise ValueError(
                f"work_dir {work_dir}: not a directory and cannot be created as one: {exc}"
            ) from exc
    ledger = ledger if ledger is not None else SandboxLedger()
    started = time.monotonic()
    gate = asyncio.Semaphore(concurrency)

    async def one(task: Task, root: Path) -> TaskValidation:
        async with gate:
            result = await validate_task(task, sandbox_factory=sandbox_factory, work_dir=root, ledger=ledger)
        if on_task_done is not None:
            on_task_done(result)
        return result

    with tempfile.TemporaryDirectory(prefix="t1-validate-") as tmp:
        root = Path(work_dir) if work_dir is not None else Path(tmp)
        results = await asyncio.gather(*(one(t, root) for t in pool.tasks))
    return PoolValidation(
        tasks=tuple(results),
        duration_s=time.monotonic() - started,
        failed=tuple(r.task_id for r in results if not r.ok),
    )


def _check_record(check: CheckResult | None) -> CheckRecord | None:
    if check is None:
        return None
    return CheckRecord(
        passed=check.passed,
        total=check.total,
        report_source=check.report_source,
        solve_s=check.solve_s,
        verifier_s=check.verifier_s,
        duration_s=check.duration_s,
        error=check.error,
        failed_assertions=check.failed_assertions,
        network=check.network,
        build_network=check.build_network,
    )


def _emits(result: TaskValidation, task: Task) -> tuple[bool, int | None]:
    """Whether the task's verifier writes a per-assertion report, and how many assertions it reports.

    It writes one when its oracle's run wrote one, or when its ``tests/test.sh`` asks pytest for one even
    though none came out here (no network, a broken toolchain): training then treats a run without one as a
    verifier failure, never as the binary fallback. The count is the oracle's observed one, else the static.
    Without an oracle, the do-nothing run's report shows the format (not the count: its tests may not
    collect).
    """
    if result.oracle is None:
        return result.nop.per_assertion_report or declares_per_assertion(task), task.n_assertions
    observed = result.oracle.per_assertion_report
    count = result.oracle.total if observed and result.oracle.total > 0 else task.n_assertions
    return observed or declares_per_assertion(task), count


def _no_oracle(result: TaskValidation) -> tuple[str, ...]:
    """The record's sentence for a task validated without an oracle (no ``solution/``)."""
    return (f"oracle: {NO_SOLUTION}: the task is not proven solvable",) if result.oracle is None else ()


def validation_record(result: PoolValidation, pool: Pool, *, t1_version: str) -> ValidationRecord:
    """The record of ``result`` that ``t1 tasks validate --record`` writes (format: ``t1_tasks.validation``).

    Args:
        result: what ``validate_pool`` returned for ``pool``.
        pool: the validated pool; its broken bundles become ``broken`` rows carrying the load error.
        t1_version: the version of T1 that ran the validation.

    Returns:
        The record: one row per task and broken bundle, sorted by id, stamped with the current UTC time. A
        task without ``solution/`` has no ``oracle`` and the verdict ``unproven`` (or ``failed``), its
        problems saying the oracle was `NO_SOLUTION`.
    """
    rows = [
        TaskRecord(
            id=r.task_id,
            verdict=r.verdict,  # type: ignore[arg-type]
            problems=tuple(r.problems) + _no_oracle(r),
            category=pool.get(r.task_id).category,
            difficulty=pool.get(r.task_id).difficulty,
            static_assertions=pool.get(r.task_id).n_assertions,
            oracle=_check_record(r.oracle),
            nop=_check_record(r.nop),
            per_assertion_report=_emits(r, pool.get(r.task_id))[0],
            assertions=_emits(r, pool.get(r.task_id))[1],
        )
        for r in result.tasks
    ]
    rows += [TaskRecord(id=b.id, verdict="broken", problems=(b.message,)) for b in pool.broken]
    return ValidationRecord(
        pool=pool.source,
        created=datetime.datetime.now(datetime.UTC),
        t1_version=t1_version,
        duration_s=result.duration_s,
        tasks=tuple(sorted(rows, key=lambda row: row.id)),
    )
