"""The verifier run: held-out tests uploaded after the agent finished, run under a deadline, results fetched.

Source: Harbor ``verifier.py`` (``tests/`` to ``/tests`` at verification time, ``bash /tests/test.sh``, the
``/logs/verifier/`` directory downloaded; harbor_tb.md §1.3); T1 §5.2 (the per-assertion report feeds the
dense reward; a verifier timeout or crash is a tagged fallback, not an agent score); T1 §7 (900 s verifier
deadline).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from t1_rollout.sandbox.base import Sandbox, SandboxError

__all__ = ["VerifierRun", "run_verifier", "TESTS_DIR", "VERIFIER_LOG_DIR"]

TESTS_DIR = "/tests"
VERIFIER_LOG_DIR = "/logs/verifier"
_TAIL_CHARS = 4000


class _TaskLike(Protocol):
    id: str
    tests_dir: Path


@dataclass(frozen=True)
class VerifierRun:
    """What one verifier run left behind.

    Attributes:
        out_dir: host directory holding the downloaded ``/logs/verifier/`` (``ctrf.json``, ``reward.json``,
            ``test-stdout.txt``); read it with ``t1_reward.read_report(out_dir, timed_out=..., crashed=...)``.
        exit_code: ``test.sh``'s exit status (informational: Harbor ignores it, the report files count);
            None when it did not finish.
        timed_out: ``test.sh`` ran past the verifier deadline (the report is then a ``verifier_timeout``
            fallback).
        duration_s: wall seconds of the whole run (upload, test.sh, download).
        stdout_tail: the last 4000 characters of test.sh's stdout and stderr.
        error: why the verifier could not run or be collected (upload, exec or download failure), or None. A
            non-None error is a verifier crash: infrastructure, never an agent score.
    """

    out_dir: Path
    exit_code: int | None
    timed_out: bool
    duration_s: float
    stdout_tail: str
    error: str | None = None

    @property
    def crashed(self) -> bool:
        """The verifier did not run to completion for an infrastructure reason."""
        return self.error is not None


async def run_verifier(sandbox: Sandbox, task: _TaskLike, *, timeout_s: float, out_dir: Path) -> VerifierRun:
    """Upload ``task.tests_dir`` to ``/tests``, run ``bash /tests/test.sh``, download ``/logs/verifier/``.

    Call it only after the agent has finished: the tests are not in the sandbox before this call, and the call
    first ends the agent phase (``sandbox.stop_agent()``: the shell and anything the agent left running are
    killed) and empties ``/logs/verifier`` so that no agent-written report is read. The verifier
    toolchain (``sandbox.verifier_env()``: python3 with pytest and pytest-json-ctrf) is put on PATH for this
    exec only. ``test.sh``'s stdout and stderr are also saved as ``test-stdout.txt`` in ``out_dir``.

    Args:
        sandbox: a started sandbox in which the agent has finished.
        task: the task (``t1_tasks.Task``: ``id``, ``tests_dir``).
        timeout_s: the verifier's wall-clock deadline in seconds (``[verifier].timeout_sec``; T1 §7: 900 s).
        out_dir: host directory to receive the verifier's output (created).

    Returns:
        The ``VerifierRun``; failures are recorded in it with their cause, never raised (cancellation aside).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    exit_code: int | None = None
    timed_out = False
    tail = ""
    error: str | None = None
    try:
        await sandbox.stop_agent()
        await sandbox.upload(task.tests_dir, TESTS_DIR, timeout_s=max(1.0, min(60.0, timeout_s)))
        # Whatever the agent left in /logs/verifier (a forged ctrf.json or reward.json) is removed first.
        result = await sandbox.exec(
            f"rm -rf {VERIFIER_LOG_DIR} && mkdir -p {VERIFIER_LOG_DIR} && bash {TESTS_DIR}/test.sh",
            timeout_s=timeout_s,
            cwd=TESTS_DIR,
            env=sandbox.verifier_env(),
            # the grader gets its own CPU budget (its deadline): the agent's limit must never kill it
            cpu_time_s=timeout_s,
        )
        exit_code, timed_out = result.exit_code, result.timed_out
        if exit_code is not None and exit_code > 128 and not timed_out:
            # killed by a signal (a sandbox limit, OOM): the report, if any, is not the verifier's verdict
            error = f"verifier of task {task.id} was killed by signal {exit_code - 128} (exit {exit_code})"
        combined = result.stdout + (("\n[stderr]\n" + result.stderr) if result.stderr else "")
        tail = combined[-_TAIL_CHARS:]
        (out_dir / "test-stdout.txt").write_text(combined, encoding="utf-8")
    except SandboxError as exc:
        error = f"verifier of task {task.id} could not run: {type(exc).__name__}: {exc}"
    try:
        await sandbox.download(VERIFIER_LOG_DIR, out_dir, timeout_s=60)
    except SandboxError as exc:
        if error is None:
            error = f"verifier output of task {task.id} could not be downloaded: {type(exc).__name__}: {exc}"
    return VerifierRun(
        out_dir=out_dir,
        exit_code=exit_code,
        timed_out=timed_out,
        duration_s=time.monotonic() - started,
        stdout_tail=tail,
        error=error,
    )
