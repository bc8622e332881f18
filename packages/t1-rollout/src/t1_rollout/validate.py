"""Pool validation: every reference solution passes every assertion; a do-nothing agent does not.

Source: issue 2 part 3 (``t1 tasks validate``); T1 §3 (task audit: a verifier that the empty trajectory
satisfies rewards nothing the agent did, so it is reported as weak).

Deadlines here are the task's own: ``solution/solve.sh`` runs under ``task.toml``'s ``[agent] timeout_sec``
and the verifier under ``[verifier] timeout_sec`` (``Task.agent_timeout_s``, ``Task.verifier_timeout_s``).
This is the only place they apply; training uses the recipe's ``rollout.agent_deadline_s`` and
``rollout.verifier_deadline_s`` for every task. Sandbox limits are the ``sandbox_factory``'s (``t1 tasks
validate``: ``LocalSandbox`` defaults); ``task.toml``'s ``[environment]`` is not used. Broken bundles never
reach this module: ``load_pool(..., strict=False)`` lists them in ``Pool.broken`` and the CLI reports them.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from t1_reward import Report, read_report
from t1_rollout.sandbox.base import Sandbox, SandboxError
from t1_rollout.verify import VerifierRun, run_verifier
from t1_tasks import Pool, Task

__all__ = [
    "CheckResult",
    "TaskValidation",
    "PoolValidation",
    "validate_task",
    "validate_pool",
    "SOLUTION_DIR",
]

SOLUTION_DIR = "/solution"
BUILD_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class CheckResult:
    """One check of one task (``oracle`` or ``nop``).

    Attributes:
        kind: ``"oracle"`` (reference solution then verifier) or ``"nop"`` (verifier straight after the
            build).
        passed: assertions passed (P).
        total: assertions reported (T).
        expected_total: the task's assertion count (``def test_`` functions).
        error: an infrastructure failure (build, solution, verifier crash or timeout, missing report), or
            None.
        duration_s: wall seconds, sandbox creation to reclamation.
        failed_assertions: names of the assertions that did not pass.
    """

    kind: str
    passed: int
    total: int
    expected_total: int
    error: str | None
    duration_s: float
    failed_assertions: tuple[str, ...] = ()

    @property
    def all_passed(self) -> bool:
        """Every expected assertion reported and passed, with no error."""
        return self.error is None and self.total == self.expected_total and self.passed == self.total


@dataclass(frozen=True)
class TaskValidation:
    """Both checks of one task and the verdict.

    Attributes:
        task_id: the task.
        oracle: the reference-solution check: must pass every assertion.
        nop: the do-nothing check: must fail at least one assertion.
    """

    task_id: str
    oracle: CheckResult
    nop: CheckResult

    @property
    def problems(self) -> list[str]:
        """Why the task is not valid (empty when it is)."""
        out = []
        if self.oracle.error:
            out.append(f"oracle: {self.oracle.error}")
        elif not self.oracle.all_passed:
            failed = ", ".join(self.oracle.failed_assertions) or "assertions missing from the report"
            out.append(
                f"oracle passes {self.oracle.passed}/{self.oracle.expected_total} assertions "
                f"(failed: {failed})"
            )
        if self.nop.error:
            out.append(f"do-nothing: {self.nop.error}")
        elif self.nop.all_passed:
            out.append("weak verifier: a do-nothing agent passes every assertion")
        return out

    @property
    def ok(self) -> bool:
        """The oracle passes everything and the do-nothing agent fails something."""
        return not self.problems


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


async def _check(
    task: Task, kind: str, sandbox_factory: Callable[[], Sandbox], work_dir: Path
) -> CheckResult:
    started = time.monotonic()
    out_dir = work_dir / task.id / kind
    run: VerifierRun | None = None
    error: str | None = None
    try:
        async with sandbox_factory() as sandbox:
            await sandbox.start(task.environment_dir, timeout_s=BUILD_TIMEOUT_S)
            if kind == "oracle":
                await sandbox.upload(task.solution_dir, SOLUTION_DIR, timeout_s=60)
                solved = await sandbox.exec(f"bash {SOLUTION_DIR}/solve.sh", timeout_s=task.agent_timeout_s)
                if not solved.ok:
                    why = "timed out" if solved.timed_out else f"exited {solved.exit_code}"
                    error = f"solution/solve.sh {why}: {(solved.stdout + solved.stderr)[-800:].strip()}"
            if error is None:
                run = await run_verifier(sandbox, task, timeout_s=task.verifier_timeout_s, out_dir=out_dir)
    except (SandboxError, OSError) as exc:  # infrastructure: recorded for this task, the pool goes on
        error = f"{type(exc).__name__}: {exc}"
    if error is None and run is not None:
        report: Report = read_report(run.out_dir, timed_out=run.timed_out, crashed=run.crashed)
        if run.error:
            error = run.error
        elif run.timed_out:
            error = f"verifier timed out after {task.verifier_timeout_s:.0f} s"
        elif report.fallback is not None:
            error = (
                f"no per-assertion report ({report.fallback}: {report.detail}); "
                f"test.sh said: {run.stdout_tail[-500:]}"
            )
        return CheckResult(
            kind=kind,
            passed=report.passed,
            total=report.total,
            expected_total=task.n_assertions,
            error=error,
            duration_s=time.monotonic() - started,
            failed_assertions=tuple(o.name for o in report.outcomes if o.status != "passed"),
        )
    return CheckResult(kind, 0, 0, task.n_assertions, error, time.monotonic() - started)


async def validate_task(
    task: Task, *, sandbox_factory: Callable[[], Sandbox], work_dir: Path
) -> TaskValidation:
    """Run the oracle check and the do-nothing check of one task, each in a fresh sandbox.

    Args:
        task: the task.
        sandbox_factory: makes a fresh, unstarted sandbox.
        work_dir: host directory for the verifier outputs (``<work_dir>/<task>/{oracle,nop}/``).

    Returns:
        The ``TaskValidation``; infrastructure failures are recorded in it, not raised.
    """
    oracle = await _check(task, "oracle", sandbox_factory, work_dir)
    nop = await _check(task, "nop", sandbox_factory, work_dir)
    return TaskValidation(task_id=task.id, oracle=oracle, nop=nop)


async def validate_pool(
    pool: Pool,
    *,
    sandbox_factory: Callable[[], Sandbox],
    concurrency: int = 2,
    work_dir: Path | None = None,
    on_task_done: Callable[[TaskValidation], None] | None = None,
) -> PoolValidation:
    """Validate every task of ``pool`` (oracle passes all, do-nothing fails some), ``concurrency`` at once.

    Args:
        pool: the pool.
        sandbox_factory: makes a fresh, unstarted sandbox (one per check).
        concurrency: tasks validated at the same time (>= 1).
        work_dir: where verifier outputs are kept (default: a temporary directory, deleted afterwards).
        on_task_done: called as each task finishes (progress display).

    Returns:
        The ``PoolValidation`` with tasks in pool order.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    started = time.monotonic()
    gate = asyncio.Semaphore(concurrency)

    async def one(task: Task, root: Path) -> TaskValidation:
        async with gate:
            result = await validate_task(task, sandbox_factory=sandbox_factory, work_dir=root)
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
