"""A verifier that ran no test: blamed on the environment from T1's own facts only, never from its output.

The task is a Terminal-Bench 2 verifier in its usual form: ``test.sh`` bootstraps uv from astral.sh, runs
pytest with pytest-json-ctrf into ``/logs/verifier/ctrf.json`` and writes ``reward.txt`` = 1 or 0 from
pytest's exit status. Runs are built by hand (the folder a verifier left, the sandbox's network policy), so
each rule of ``t1_rollout.attribution`` is shown on its own; the attacks against a real sandbox are in
``tests/sandbox_suite/test_verifier_attacks.py``.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from t1_rollout.attribution import environment_cause, expects_per_assertion, judge_run, verifier_hosts
from t1_rollout.validate import CheckResult, PoolValidation, TaskValidation, validation_record
from t1_rollout.verify import VerifierRun
from t1_spec import DenseRewardSpec
from t1_tasks import load_pool
from t1_tasks.validation import CheckRecord, TaskRecord

TB2_TEST_SH = """#!/bin/bash
apt-get update && apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh
source $HOME/.local/bin/env
uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 pytest --ctrf /logs/verifier/ctrf.json \
  /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""
BINARY_TEST_SH = """#!/bin/bash
python3 /tests/check.py && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
"""
#: What test.sh printed when curl could not resolve the host (or when the agent's fake curl said so).
DNS_ERROR = "curl: (6) Could not resolve host: astral.sh\n/tests/test.sh: line 4: uvx: command not found\n"


@dataclass
class Task:
    id: str
    tests_dir: Path
    n_assertions: int | None = 2


def _task(tmp_path: Path, test_sh: str = TB2_TEST_SH) -> Task:
    tests = tmp_path / "tests"
    tests.mkdir(exist_ok=True)
    (tests / "test.sh").write_text(test_sh)
    (tests / "test_outputs.py").write_text("def test_a():\n    pass\n\n\ndef test_b():\n    pass\n")
    return Task("tb2-task", tests)


def _run(
    tmp_path: Path, *, network: bool | None, files: dict[str, str], stdout: str = DNS_ERROR
) -> VerifierRun:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    (out / "test-stdout.txt").write_text(stdout)
    for name, text in files.items():
        (out / name).write_text(text)
    return VerifierRun(out, exit_code=0, timed_out=False, duration_s=1.0, stdout_tail=stdout, network=network)


def _judge(run: VerifierRun, task: Task, validated: TaskRecord | None = None):
    return asyncio.run(judge_run(run, task, DenseRewardSpec(), validated=validated))[1]


def _record(source: str, *, error: str | None = None, network: bool | None = False, **row) -> TaskRecord:
    oracle = CheckRecord(
        passed=2 if source == "ctrf" else 0,
        total=2 if source == "ctrf" else 0,
        report_source=source,
        duration_s=1.0,
        error=error,
        network=network,
    )
    return TaskRecord(id="tb2-task", verdict="ok" if error is None else "failed", oracle=oracle, **row)


def test_the_hosts_of_test_sh_are_read_from_the_script(tmp_path):
    assert verifier_hosts(_task(tmp_path)) == ("astral.sh", "the distribution's package archive")


def test_no_network_and_a_bootstrap_from_astral_sh_is_an_infrastructure_failure_never_a_zero(tmp_path):
    # test.sh wrote reward.txt = 0 after the bootstrap failed; there is no validation record.
    verdict = _judge(_run(tmp_path, network=False, files={"reward.txt": "0\n"}), _task(tmp_path))
    assert verdict.status == "failed" and verdict.reward.value is None
    assert "verifier could not reach astral.sh" in verdict.cause and "no network" in verdict.cause
    assert "reward.txt is ignored" in verdict.cause


def test_a_verifier_that_never_started_pytest_is_dropped_unless_a_record_shows_it_runs_here(tmp_path):
    # The sandbox may reach the network; the bootstrap failed and test.sh wrote reward.txt = 0. The printed
    # DNS error is not read: no pytest session in T1's capture is what says the verifier did not run.
    verdict = _judge(_run(tmp_path, network=True, files={"reward.txt": "0\n"}), _task(tmp_path))
    assert (verdict.status, verdict.reward.value) == ("failed", None)
    assert "verifier did not run" in verdict.cause and "reward.txt is ignored" in verdict.cause
    # a validation record showing the task's verifier writing its report here: the agent kept it from it
    run = _run(tmp_path, network=True, files={"reward.txt": "0\n"})
    proven = _judge(run, _task(tmp_path), _record("ctrf", network=True))
    assert (proven.status, proven.reward.value, proven.reward.kind) == ("finished", 0.0, "no_verdict")
    assert "verifier failure" in proven.cause


def test_an_unknown_network_policy_blames_nothing_but_a_verifier_that_did_not_start(tmp_path):
    verdict = _judge(_run(tmp_path, network=None, files={"reward.txt": "0\n"}), _task(tmp_path))
    assert (verdict.status, verdict.reward.value) == ("failed", None)
    assert "verifier did not run" in verdict.cause
    # pytest started and failed a test: scored, whatever the network
    closed = "===== test session starts =====\n===== 1 failed, 1 passed in 0.10s =====\n"
    run = _run(tmp_path, network=None, files={"reward.txt": "0\n"}, stdout=closed)
    verdict = _judge(run, _task(tmp_path))
    assert (verdict.status, verdict.reward.value) == ("finished", 0.0)


def test_when_the_oracle_got_its_report_here_a_missing_one_is_the_agents_doing(tmp_path):
    # Same policy (no network), yet the task's reference solution got a CTRF report on this machine: the
    # verifier can run here, so the DNS error and the missing report are the agent's.
    validated = _record("ctrf")
    run = _run(tmp_path, network=False, files={"reward.txt": "0\n"})
    assert environment_cause(run, _task(tmp_path), validated) is None
    verdict = _judge(run, _task(tmp_path), validated)
    assert (verdict.status, verdict.reward.value, verdict.reward.kind) == ("finished", 0.0, "no_verdict")


def test_when_the_oracle_got_none_here_either_the_environment_is_to_blame(tmp_path):
    validated = _record(
        "reward.txt",
        error="tests/test.sh exited 0 and wrote no per-assertion report",
        per_assertion_report=True,
    )
    run = _run(tmp_path, network=False, files={"reward.txt": "0\n"})
    verdict = _judge(run, _task(tmp_path), validated)
    assert verdict.status == "failed" and verdict.reward.value is None
    assert "reference solution either" in verdict.cause and "astral.sh" in verdict.cause


def test_a_record_taken_under_another_network_policy_does_not_decide(tmp_path):
    # Validated with network (the oracle got its report), trained without: the record says nothing about
    # this policy, so the static facts decide: no network and a host to reach.
    validated = _record("ctrf", network=True)
    verdict = _judge(_run(tmp_path, network=False, files={"reward.txt": "0\n"}), _task(tmp_path), validated)
    assert verdict.status == "failed" and "could not reach astral.sh" in verdict.cause


def test_a_report_that_came_out_is_scored_whatever_the_network(tmp_path):
    tests = [{"name": "test_outputs.py::test_a", "status": "passed"}, {"name": "test_outputs.py::test_b",
             "status": "failed"}]  # fmt: skip
    files = {"ctrf.json": json.dumps({"results": {"tests": tests}}), "reward.txt": "0\n"}
    verdict = _judge(_run(tmp_path, network=False, files=files, stdout=""), _task(tmp_path))
    assert (verdict.status, verdict.reward.value, verdict.reward.kind) == (
        "finished",
        pytest.approx(1 / 20),
        "dense",
    )


def test_a_binary_only_task_keeps_its_binary_fallback(tmp_path):
    # No per-assertion report asked for, no host: reward.txt is the task's verdict (T1 §5.2's fallback).
    task = _task(tmp_path, BINARY_TEST_SH)
    assert not expects_per_assertion(task, None)
    for value in ("1", "0"):
        verdict = _judge(_run(tmp_path, network=False, files={"reward.txt": value}, stdout=""), task)
        assert (verdict.status, verdict.reward.value, verdict.reward.kind) == (
            "finished",
            float(value),
            "binary_fallback",
        )


def test_a_record_whose_oracle_got_no_report_still_expects_one_from_a_ctrf_task(tmp_path):
    # Before the record said so explicitly, an oracle without a report made the task "binary-only" and a
    # reward.txt = 0 from a broken bootstrap was trained on.
    old_style = _record("reward.txt", error="no per-assertion report")
    assert expects_per_assertion(_task(tmp_path), old_style)
    assert not expects_per_assertion(_task(tmp_path, BINARY_TEST_SH), _record("reward.txt"))


def test_the_validation_record_says_whether_a_task_emits_a_report_and_how_many_assertions():
    pool = load_pool("builtin:mini")
    task = pool.tasks[0]

    def check(kind: str, source: str, total: int, error: str | None = None) -> CheckResult:
        return CheckResult(
            kind, total, total, task.n_assertions, error, 1.0, report_source=source, network=False
        )

    ok = TaskValidation(task.id, check("oracle", "ctrf", task.n_assertions), check("nop", "ctrf", 0))
    broken = TaskValidation(task.id, check("oracle", "reward.txt", 0, "no report"), check("nop", "none", 0))
    for result, count in ((ok, task.n_assertions), (broken, task.n_assertions)):
        record = validation_record(PoolValidation((result,)), pool, t1_version="test")
        row = record.get(task.id)
        # the mini pool's test.sh asks for a CTRF report, so the task emits one even when none came out here
        assert row.per_assertion_report is True and row.assertions == count
        assert row.oracle.network is False
    assert TaskRecord.model_validate_json(row.model_dump_json()) == row


# --- one scoring rule: training (judge_run) and `t1 reward` (summarize_verifier_dir) agree --------------

CLOSED_2_PASSED = "===== test session starts =====\ncollected 2 items\n\n===== 2 passed in 0.10s =====\n"


def _both(tmp_path: Path, files: dict[str, str], stdout: str, task: Task | None = None, **kw):
    """The verdict training gives the folder, and what `t1 reward` prints for it (dense, S = 20)."""
    from t1_rollout.verifier_logs import summarize_verifier_dir

    task = task or _task(tmp_path)
    run = _run(tmp_path, network=True, files=files, stdout=stdout)
    trained = _judge(run, task)
    if not any(run.out_dir.iterdir()):
        return trained, None
    return trained, summarize_verifier_dir(run.out_dir, **kw)


@pytest.mark.parametrize("broken", ["", '{"results": {"tests": [{"name": "test_outputs.py::test_a"'])
def test_a_solved_reward_file_beside_an_empty_or_truncated_report_is_the_binary_fallback(tmp_path, broken):
    # test.sh asks for a CTRF report; it came out empty or cut, reward.txt says 1 (pytest exited 0), no
    # validation record. T1 §5.2: the binary fallback, never 0; under dense no more than pytest's 2 passed.
    files = {"ctrf.json": broken, "reward.txt": "1\n"}
    trained, shown = _both(tmp_path, files, CLOSED_2_PASSED)
    assert (trained.status, trained.reward.kind) == ("finished", "binary_fallback")
    assert trained.reward.value == pytest.approx(2 / 20)
    assert (shown["status"], shown["kind"], shown["reward"]) == (
        "finished",
        "binary_fallback",
        trained.reward.value,
    )
    assert shown["rewards"]["binary"]["reward"] == 1.0
    # without pytest's closing line (a test.sh that hides pytest's output), b itself
    trained, shown = _both(tmp_path, files, "")
    assert trained.reward.value == 1.0 == shown["reward"]


def test_a_solved_reward_file_beside_failures_in_pytests_closing_line_scores_zero(tmp_path):
    closed = "===== test session starts =====\n===== 1 failed, 1 passed in 0.10s =====\n"
    trained, shown = _both(tmp_path, {"ctrf.json": "", "reward.txt": "1\n"}, closed)
    assert (trained.reward.value, trained.reward.kind) == (0.0, "tampered")
    assert (shown["reward"], shown["kind"]) == (0.0, "tampered")


def test_a_verifier_that_wrote_nothing_is_dropped_not_the_agents_zero(tmp_path):
    trained, shown = _both(tmp_path, {}, "bash: /tests/test.sh: line 3: uvx: command not found\n")
    assert (trained.status, trained.reward.value) == ("failed", None)
    assert "wrote nothing" in trained.cause
    assert (shown["status"], shown["reward"]) == ("failed", None)
    # a pytest session that ran and left no file: the run removed its output (the agent's 0)
    trained, _ = _both(tmp_path, {}, CLOSED_2_PASSED)
    assert (trained.status, trained.reward.value, trained.reward.kind) == ("finished", 0.0, "no_verdict")
    # with a record showing the verifier writes its report on this machine, nothing written is the agent's
    run = _run(tmp_path, network=True, files={}, stdout="")
    proven = _judge(run, _task(tmp_path), _record("ctrf", network=True))
    assert (proven.status, proven.reward.value) == ("finished", 0.0)


def test_t1_reward_given_the_task_agrees_with_training_on_a_missing_report(tmp_path):
    # no ctrf.json at all: only the task's test.sh (--ctrf) says a report was due
    from t1_rollout.verifier_logs import summarize_verifier_dir

    task = load_pool("builtin:mini").tasks[0]
    run = _run(tmp_path, network=True, files={"reward.txt": "1\n"}, stdout=CLOSED_2_PASSED)
    trained = _judge(run, task)
    shown = summarize_verifier_dir(run.out_dir, task_dir=Path(task.tests_dir).parent)
    assert (trained.reward.kind, trained.reward.value) == ("binary_fallback", pytest.approx(2 / 20))
    assert (shown["kind"], shown["reward"]) == (trained.reward.kind, trained.reward.value)


# --- a task whose own verifier hangs ------------------------------------------------------------------------


def _timed_out(tmp_path: Path) -> VerifierRun:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    return VerifierRun(out, exit_code=None, timed_out=True, duration_s=900.0, stdout_tail="", network=True)


def test_a_timeout_is_the_tasks_when_its_reference_solution_timed_out_too(tmp_path):
    hung = _record(
        "none", error="verifier timed out after 900 s (verifier.timeout_sec in task.toml)", network=True
    )
    verdict = _judge(_timed_out(tmp_path), _task(tmp_path), hung)
    assert (verdict.status, verdict.reward.value) == ("failed", None)
    assert "reference solution at validation" in verdict.cause


def test_a_timeout_is_the_tasks_when_the_task_failed_validation(tmp_path):
    failed = _record("ctrf", network=True).model_copy(
        update={"verdict": "failed", "problems": ("do-nothing passes",)}
    )
    verdict = _judge(_timed_out(tmp_path), _task(tmp_path), failed)
    assert verdict.status == "failed" and "failed validation" in verdict.cause


def test_a_timeout_on_a_task_whose_verifier_ran_at_validation_is_the_agents_zero(tmp_path):
    for validated in (None, _record("ctrf", network=True)):
        verdict = _judge(_timed_out(tmp_path), _task(tmp_path), validated)
        assert (verdict.status, verdict.reward.value, verdict.reward.kind) == ("finished", 0.0, "no_verdict")


def test_output_t1_could_not_collect_from_a_healthy_sandbox_stays_the_agents_zero(tmp_path):
    # the agent filled the disk T1 stages the output on: nothing came back, yet it is not "wrote nothing"
    run = _run(tmp_path, network=True, files={}, stdout="")
    run = VerifierRun(run.out_dir, 0, False, 1.0, "", sabotage="staging failed: No space left on device")
    verdict = _judge(run, _task(tmp_path))
    assert (verdict.status, verdict.reward.value) == ("finished", 0.0) and "No space left" in verdict.cause
