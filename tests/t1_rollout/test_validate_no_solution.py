"""A bundle without ``solution/`` (Harbor allows one): loaded, do-nothing checked, recorded ``unproven``.

One rule for ``t1 tasks validate`` and ``tools/check_tasks.py`` (both call ``validate_task``): the oracle is
not run, the do-nothing check is, and the record's row has no oracle and the verdict ``unproven`` (or
``failed`` when the do-nothing check fails). Failure attribution takes that row as no proof that the
verifier reports on this machine: a run without a report, or a verifier timeout, is never the agent's 0.
``t1 eval --policy oracle`` skips such a task with the cause ``no solution`` (never scored).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from t1_rollout.attribution import environment_cause, judge_run, task_facts, task_timeout_cause
from t1_rollout.eval_metrics import summarize
from t1_rollout.evaluate import CheckPolicy
from t1_rollout.validate import (
    NO_SOLUTION,
    CheckResult,
    PoolValidation,
    TaskValidation,
    run_check,
    short_cause,
    validate_pool,
    validation_record,
)
from t1_rollout.verify import VerifierRun
from t1_spec import DenseRewardSpec
from t1_tasks import load_pool

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None or os.geteuid() != 0,
    reason="needs bubblewrap (apt-get install bubblewrap) and root",
)
MINI_TASK = "csv-region-totals"


def _no_solution_pool(tmp_path: Path) -> Path:
    """A folder holding one mini task copied without its ``solution/``."""
    src = load_pool("builtin:mini").get(MINI_TASK).path
    root = tmp_path / "pool"
    shutil.copytree(src, root / MINI_TASK)
    shutil.rmtree(root / MINI_TASK / "solution")
    return root


def _no_sandbox():
    raise AssertionError("no sandbox may be made for a check that cannot run")


def _nop(*, error: str | None = None, passed: int = 0, total: int = 3) -> CheckResult:
    return CheckResult("nop", passed, total, 3, error, 1.0, report_source="ctrf", network=False)


def test_a_bundle_without_solution_loads_for_every_verb(tmp_path):
    # t1 train, t1 eval and t1 tasks load pools this way: the agent needs no solution
    pool = load_pool(_no_solution_pool(tmp_path))
    assert [t.id for t in pool.tasks] == [MINI_TASK] and not pool.tasks[0].has_solution


def test_the_oracle_check_of_a_bundle_without_solution_is_refused_by_name(tmp_path):
    task = load_pool(_no_solution_pool(tmp_path)).tasks[0]
    with pytest.raises(ValueError, match="no oracle check without .*solution/solve.sh"):
        asyncio.run(run_check(task, "oracle", sandbox_factory=_no_sandbox, work_dir=tmp_path))


def test_without_oracle_the_verdict_is_unproven_or_failed_never_ok():
    assert TaskValidation("t", None, _nop()).verdict == "unproven"
    assert not TaskValidation("t", None, _nop()).ok and TaskValidation("t", None, _nop()).problems == []
    weak = TaskValidation("t", None, _nop(passed=3))
    assert weak.verdict == "failed" and weak.problems == [
        "weak verifier: a do-nothing agent passes every assertion"
    ]
    assert TaskValidation("t", None, _nop(error="verifier timed out after 30 s")).verdict == "failed"


def test_the_record_row_has_no_oracle_and_says_why(tmp_path):
    pool = load_pool(_no_solution_pool(tmp_path))
    result = PoolValidation((TaskValidation(MINI_TASK, None, _nop()),))
    row = validation_record(result, pool, t1_version="test").get(MINI_TASK)
    assert row is not None and row.verdict == "unproven" and row.oracle is None
    assert row.nop is not None and row.nop.total == 3
    assert row.problems == (f"oracle: {NO_SOLUTION}: the task is not proven solvable",)
    assert row.oracle_reported is None and row.observed_assertions is None
    # the format the do-nothing run wrote is the verifier's: a run without one has no verdict
    assert row.per_assertion_report is True


def test_attribution_takes_an_unproven_row_as_no_proof_never_the_agents_zero(tmp_path):
    pool = load_pool(_no_solution_pool(tmp_path))
    task = pool.tasks[0]
    row = validation_record(
        PoolValidation((TaskValidation(MINI_TASK, None, _nop()),)), pool, t1_version="test"
    ).get(MINI_TASK)
    out = tmp_path / "out"
    out.mkdir()
    (out / "test-stdout.txt").write_text("")  # the verifier wrote nothing: no report, no reward
    run = VerifierRun(out, exit_code=0, timed_out=False, duration_s=1.0, stdout_tail="", network=False)
    assert task_facts(task, row, False).verifier_proven is False
    assert environment_cause(run, task, row) is None  # its test.sh names no host: nothing blamed on it
    _, verdict = asyncio.run(judge_run(run, task, DenseRewardSpec(), validated=row))
    assert verdict.status != "finished" and verdict.reward.value is None, verdict  # dropped, not a 0
    hung = VerifierRun(out, exit_code=None, timed_out=True, duration_s=30.0, stdout_tail="", network=False)
    cause = task_timeout_cause(hung, row)
    assert cause is not None and "unproven" in cause and NO_SOLUTION in cause


def test_the_oracle_policy_skips_a_task_without_solution_and_scores_nothing(tmp_path):
    task = load_pool(_no_solution_pool(tmp_path)).tasks[0]
    policy = CheckPolicy("oracle", _no_sandbox, DenseRewardSpec())
    trial = asyncio.run(policy.attempt(task, 0, tmp_path))
    assert trial.status == "failed" and trial.reward is None and not trial.resolved
    assert trial.cause is not None and trial.cause.startswith("no solution: skipped")
    figures = summarize([trial], attempts=1)
    assert figures["resolved_rate"] is None and figures["failed_causes"] == {"no solution": 1}


def test_a_build_log_in_a_cause_is_cut_to_its_step_exit_code_and_last_lines():
    log = "docker build failed at RUN apt-get install -y cowsay (exit code 100)\n" + "\n".join(
        f"#7 {i} fetching" for i in range(500)
    )
    cut = short_cause(log)
    assert cut.startswith("docker build failed at RUN apt-get install -y cowsay (exit code 100) | ... |")
    assert cut.endswith("#7 497 fetching | #7 498 fetching | #7 499 fetching") and "#7 250 " not in cut
    assert short_cause("one line\n\nsecond") == "one line | second"


@needs_bwrap
def test_validate_runs_the_do_nothing_check_alone_and_records_unproven(tmp_path):
    pool = load_pool(_no_solution_pool(tmp_path))
    from t1_sandbox.local import LocalSandbox

    result = asyncio.run(validate_pool(pool, sandbox_factory=LocalSandbox, work_dir=tmp_path / "work"))
    (r,) = result.tasks
    assert r.oracle is None and r.nop.error is None and not r.nop.all_passed, r.problems
    assert r.verdict == "unproven" and result.failed == (MINI_TASK,)
    assert not (tmp_path / "work" / MINI_TASK / "oracle").exists()
    row = validation_record(result, pool, t1_version="test").get(MINI_TASK)
    assert row is not None and row.verdict == "unproven" and row.oracle is None and row.nop is not None
