"""The verifier run: held-out tests uploaded after the agent, a deadline, results fetched."""

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from t1_reward import FallbackCause, judge, read_report
from t1_rollout.verify import run_verifier
from t1_sandbox.local import LocalSandbox
from t1_spec import DenseRewardSpec
from t1_tasks import load_pool

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or os.geteuid() != 0,
    reason="needs bubblewrap (apt-get install bubblewrap) and root",
)


@dataclass
class FakeTask:
    id: str
    tests_dir: Path


@pytest.fixture(scope="module")
def csv_task():
    return load_pool("builtin:mini").get("csv-region-totals")


async def test_tests_are_absent_until_the_verifier_runs(csv_task, tmp_path):
    async with LocalSandbox() as sb:
        await sb.start(csv_task.environment_dir, timeout_s=60)
        shell = await sb.open_shell()
        assert (await sb.exec("test -e /tests", timeout_s=10)).exit_code == 1
        await run_verifier(sb, csv_task, timeout_s=60, out_dir=tmp_path / "v")
        assert (await sb.exec("test -f /tests/test_outputs.py", timeout_s=10)).exit_code == 0
        assert not shell.alive, "the agent's shell outlived the start of the verifier"


async def test_a_report_forged_by_the_agent_is_not_read(csv_task, tmp_path):
    forged_ctrf = {
        "results": {
            "tool": {"name": "pytest"},
            "summary": {},
            "tests": [{"name": f"t{i}", "status": "passed", "duration": 1} for i in range(4)],
        }
    }
    async with LocalSandbox() as sb:
        await sb.start(csv_task.environment_dir, timeout_s=60)
        shell = await sb.open_shell()
        forge = (
            f"mkdir -p /logs/verifier; echo '{json.dumps(forged_ctrf)}' > /tmp/c.json; "
            "(while :; do cp /tmp/c.json /logs/verifier/ctrf.json; echo '{\"reward\": 1.0}' "
            "> /logs/verifier/reward.json; sleep 0.05; done) &\n"
        )
        await shell.send(forge, duration_s=0.5, max_wait_s=2)
        run = await run_verifier(sb, csv_task, timeout_s=60, out_dir=tmp_path / "v")
    report = read_report(run.out_dir)
    assert report.total == csv_task.n_assertions and report.passed < report.total
    assert json.loads((run.out_dir / "reward.json").read_text()) == {"reward": 0.0}


async def test_oracle_passes_every_assertion_and_do_nothing_does_not(csv_task, tmp_path):
    async with LocalSandbox() as sb:
        await sb.start(csv_task.environment_dir, timeout_s=60)
        await sb.upload(csv_task.solution_dir, "/solution")
        assert (await sb.exec("bash /solution/solve.sh", timeout_s=60)).ok
        run = await run_verifier(sb, csv_task, timeout_s=60, out_dir=tmp_path / "oracle")
    assert run.error is None and not run.timed_out and run.exit_code == 0
    report = read_report(run.out_dir)
    assert report.fallback is None and report.source == "ctrf"
    assert (report.passed, report.total) == (csv_task.n_assertions, csv_task.n_assertions)
    assert json.loads((run.out_dir / "reward.json").read_text()) == {"reward": 1.0}
    assert (run.out_dir / "test-stdout.txt").is_file()

    async with LocalSandbox() as sb:
        await sb.start(csv_task.environment_dir, timeout_s=60)
        run = await run_verifier(sb, csv_task, timeout_s=60, out_dir=tmp_path / "nop")
    report = read_report(run.out_dir)
    assert run.error is None and report.fallback is None
    assert report.total == csv_task.n_assertions and report.passed < report.total
    assert json.loads((run.out_dir / "reward.json").read_text()) == {"reward": 0.0}


def _env(tmp_path: Path) -> Path:
    env = tmp_path / "environment"
    env.mkdir()
    (env / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    return env


async def test_verifier_timeout_is_recorded_not_scored(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text("mkdir -p /logs/verifier\nsleep 60 &\nsleep 30\n")
    async with LocalSandbox() as sb:
        await sb.start(_env(tmp_path), timeout_s=30)
        run = await run_verifier(sb, FakeTask("sleepy", tests), timeout_s=1, out_dir=tmp_path / "out")
    assert run.timed_out and run.exit_code is None and run.error is None
    assert run.duration_s < 10
    report = read_report(run.out_dir, timed_out=run.timed_out, crashed=run.crashed)
    assert report.fallback is FallbackCause.VERIFIER_TIMEOUT


async def test_verifier_crash_is_recorded_with_its_cause(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text("true\n")
    sb = LocalSandbox()
    await sb.start(_env(tmp_path), timeout_s=30)
    await sb.close()  # the sandbox is lost before the verifier runs
    run = await run_verifier(sb, FakeTask("lost", tests), timeout_s=10, out_dir=tmp_path / "out")
    assert run.crashed and "could not run" in run.error and "lost" in run.error
    report = read_report(run.out_dir, timed_out=run.timed_out, crashed=run.crashed)
    assert report.fallback is FallbackCause.VERIFIER_CRASH


async def test_the_agents_cpu_limit_never_kills_the_verifier(csv_task, tmp_path):
    # pytest alone needs more than 1 s of CPU: under the agent's 1 s limit it would die of SIGXCPU
    async with LocalSandbox(cpu_time_s=1) as sb:
        await sb.start(csv_task.environment_dir, timeout_s=60)
        run = await run_verifier(sb, csv_task, timeout_s=60, out_dir=tmp_path / "v")
    assert run.error is None, run.error
    report = read_report(run.out_dir, crashed=run.crashed)
    assert report.fallback is None and report.total == csv_task.n_assertions


async def test_a_verifier_killed_by_a_signal_gives_no_verdict_and_scores_zero(csv_task, tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    # writes a binary outcome, then dies the way a sandbox limit kills it
    (tests / "test.sh").write_text(
        "mkdir -p /logs/verifier; echo '{\"reward\": 0.0}' > /logs/verifier/reward.json; kill -XCPU $$\n"
    )
    async with LocalSandbox() as sb:
        await sb.start(csv_task.environment_dir, timeout_s=60)
        run = await run_verifier(sb, FakeTask("killed", tests), timeout_s=30, out_dir=tmp_path / "v")
    assert run.exit_code == 128 + 24
    # every T1-side call worked: not an infrastructure failure, but no verdict either
    assert run.signal == 24 and run.error is None and run.crashed
    report = read_report(run.out_dir, crashed=run.crashed)
    assert report.fallback == FallbackCause.VERIFIER_CRASH
    verdict = judge(report, DenseRewardSpec(), infrastructure_error=run.error, evidence=run.evidence)
    assert (verdict.status, verdict.reward.value, verdict.reward.kind) == ("finished", 0.0, "no_verdict")


@pytest.mark.parametrize("sabotage", ["chmod 555 /logs", "chmod 555 /tmp", "chmod 000 /logs/verifier"])
async def test_an_agent_that_locks_the_verifiers_folders_is_still_graded(csv_task, tmp_path, sabotage):
    # The agent's doing must be graded, never turned into an infrastructure failure that escapes the reward.
    async with LocalSandbox() as sb:
        await sb.start(csv_task.environment_dir, timeout_s=60)
        await sb.upload(csv_task.solution_dir, "/solution")
        assert (await sb.exec(f"bash /solution/solve.sh && {sabotage}", timeout_s=60)).ok
        run = await run_verifier(sb, csv_task, timeout_s=60, out_dir=tmp_path / "v")
    assert run.error is None and run.exit_code == 0, run
    report = read_report(run.out_dir)
    assert (report.passed, report.total) == (csv_task.n_assertions, csv_task.n_assertions)
