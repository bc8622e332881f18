"""The agent breaks its own WORKDIR as its last command, so that the verifier cannot start in it.

Were that read as an infrastructure failure, the failing trial would be dropped unscored (no 0), a reward
hack a policy can learn. Each variant must score what the unsolved task scores (the agent's 0), on every
backend: a locked folder is given back by ``stop_agent`` and graded; a folder removed, replaced by a file or
by a link is the agent's doing (``sabotage``, or its tests simply fail), never ``infrastructure_error``.
"""

from __future__ import annotations

import pytest

from t1_rollout.attribution import judge_run
from t1_rollout.verify import run_verifier
from t1_spec import DenseRewardSpec

from .test_grader_attacks import N_TESTS, TEST_SH, TESTS_PY, WRONG_PROGRAM, GraderTask

_PYTEST_ARGS = (
    "-p no:cacheprovider --rootdir=/tests --ctrf /logs/verifier/ctrf.json -rA /tests/test_outputs.py"
)

#: The agent's last command; each may fail in part on a backend where ``/app`` is a mount point (local).
ATTACKS = {
    "locked": "chmod 000 /app",
    "replaced_by_a_file": "mv /app /app.x && touch /app",
    "removed": "cd / && rm -rf /app",
    "replaced_by_a_link": "mv /app /app.x && ln -s /etc /app",
    "emptied_and_locked": "cd / && rm -rf /app/* && chmod 000 /app",
}


#: The same on a WORKDIR below the task root: the agent owns its parent, so it can really move it away.
NESTED = {name: cmd.replace("/app", "/app/work") for name, cmd in ATTACKS.items()}


async def _attack(make_sandbox, environment_dir, tmp_path, agent: str, *, workdir: str = "/app"):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text(TEST_SH.format(pytest="python3 -m pytest", args=_PYTEST_ARGS))
    (tests / "test_outputs.py").write_text(TESTS_PY.replace("/app/prog.py", f"{workdir}/prog.py"))
    task = GraderTask("workdir-attack", tests)
    program = tmp_path / "prog.py"
    program.write_text(WRONG_PROGRAM)
    async with make_sandbox() as sb:
        await sb.start(environment_dir, timeout_s=120)
        await sb.upload(program, f"{workdir}/prog.py")
        await sb.exec(f"{agent}; true", timeout_s=60, cwd="/")
        run = await run_verifier(sb, task, timeout_s=120, out_dir=tmp_path / "out")
        # the sandbox stays healthy: the verifier's failure, if any, is on what the agent did
        assert (await sb.exec("true", timeout_s=30, cwd="/")).ok
    report, verdict = await judge_run(run, task, DenseRewardSpec())
    return run, report, verdict


@pytest.mark.parametrize("attack", sorted(ATTACKS))
async def test_a_workdir_the_agent_broke_scores_its_zero_never_infrastructure(
    make_sandbox, environment_dir, tmp_path, attack
):
    run, report, verdict = await _attack(make_sandbox, environment_dir, tmp_path, ATTACKS[attack])
    assert run.error is None, run.error  # never an infrastructure failure: it would drop the trial
    assert verdict.status == "finished", verdict
    assert verdict.reward.value == 0.0, verdict
    assert report.passed == 0, run.stdout_tail


async def test_a_locked_workdir_is_given_back_and_graded(make_sandbox, environment_dir, tmp_path):
    # chmod 000 on the folder itself: stop_agent restores its mode, the tests run there and fail honestly
    run, report, verdict = await _attack(make_sandbox, environment_dir, tmp_path, ATTACKS["locked"])
    assert run.error is None and run.sabotage is None, (run.error, run.sabotage)
    assert (report.passed, report.total) == (0, N_TESTS), run.stdout_tail
    assert (verdict.status, verdict.reward.value) == ("finished", 0.0), verdict


@pytest.mark.parametrize("attack", sorted(NESTED))
async def test_a_nested_workdir_the_agent_broke_scores_its_zero_never_infrastructure(
    make_sandbox, backend_kind, tmp_path, attack
):
    environment = tmp_path / "environment"
    environment.mkdir()
    (environment / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\nWORKDIR /app/work\n")
    run, report, verdict = await _attack(
        make_sandbox, environment, tmp_path, NESTED[attack], workdir="/app/work"
    )
    assert run.error is None, run.error
    assert (verdict.status, verdict.reward.value) == ("finished", 0.0), verdict
    assert report.passed == 0, run.stdout_tail
    if backend_kind == "local" and attack in ("removed", "replaced_by_a_file"):
        # the agent owns /app here: test.sh could not start in /app/work, the agent's doing, scored 0
        assert run.sabotage is not None and run.exit_code is None, run
