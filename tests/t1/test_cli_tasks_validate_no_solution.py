"""`t1 tasks validate` on bundles without ``solution/`` and on a failed build: the table and the record.

A bundle without ``solution/`` loads (Harbor's rule, as ``tools/check_tasks.py`` has it): its oracle column
says ``not run (no solution/)``, the do-nothing check runs, the verdict is ``unproven`` (exit 1, listed
apart from failures) and the record's row has no oracle. A failed build's verdict cell holds the cause
(first line, last lines), the record the whole log.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from t1.cli import app
from t1_sandbox.base import SandboxError
from t1_tasks import load_pool

runner = CliRunner()
MINI_TASK = "csv-region-totals"
needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None or os.geteuid() != 0,
    reason="needs bubblewrap (apt-get install bubblewrap) and root",
)
BUILD_LOG = "docker build of environment/ failed at step RUN make (exit code 2)\n" + "\n".join(
    f"build-log-line-{i:04d}" for i in range(400)
)


def _pool(tmp_path: Path, *, solution: bool) -> Path:
    root = tmp_path / "pool"
    shutil.copytree(load_pool("builtin:mini").get(MINI_TASK).path, root / MINI_TASK)
    if not solution:
        shutil.rmtree(root / MINI_TASK / "solution")
    return root


@needs_bwrap
def test_a_bundle_without_solution_is_validated_by_the_do_nothing_check_alone(tmp_path):
    record = tmp_path / "record.json"
    result = runner.invoke(
        app, ["tasks", "validate", str(_pool(tmp_path, solution=False)), "--record", str(record)]
    )
    out = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert "broken bundle" not in out and "solve.sh: missing" not in out
    assert "not run (no solution/)" in out and "unproven" in out
    assert "1 of 1 task not proven solvable (no solution/; do-nothing check only)" in out
    assert "failed validation" not in out
    row = json.loads(record.read_text())["tasks"][0]
    assert row["verdict"] == "unproven" and row["oracle"] is None
    assert row["nop"]["report_source"] == "ctrf" and row["nop"]["passed"] < row["nop"]["total"]


class _FailingBuild:
    """A sandbox whose build fails with a long log, as the Docker backend's does."""

    network = False

    async def start(self, environment_dir: Path, *, timeout_s: float) -> None:
        raise SandboxError(BUILD_LOG)

    async def close(self) -> None:
        return None


def test_a_failed_build_shows_its_cause_and_the_record_keeps_the_whole_log(tmp_path, monkeypatch):
    import t1.cli_tasks as cli_tasks

    monkeypatch.setattr(cli_tasks, "_validation_sandboxes", lambda recipe, needed: (_FailingBuild, "fake"))
    record = tmp_path / "record.json"
    result = runner.invoke(
        app, ["tasks", "validate", str(_pool(tmp_path, solution=True)), "--record", str(record)]
    )
    out = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert "failed at step RUN make (exit code 2)" in out
    assert "build-log-line-0399" in out and "build-log-line-0200" not in out
    row = json.loads(record.read_text())["tasks"][0]
    assert row["verdict"] == "failed" and "build-log-line-0200" in row["oracle"]["error"]


def test_training_loads_a_pool_without_solutions_and_its_unproven_record(tmp_path):
    # the agent needs no solution: `t1 train` loads the pool (and its record) as the preflight does
    from t1.run.pools import load_one, load_validation
    from t1_rollout.validate import CheckResult, PoolValidation, TaskValidation, validation_record
    from t1_spec import PoolSpec
    from t1_tasks import write_record

    root = _pool(tmp_path, solution=False)
    nop = CheckResult("nop", 0, 4, 4, None, 1.0, report_source="ctrf", network=False)
    record = tmp_path / "record.json"
    loaded = load_pool(root)
    write_record(
        validation_record(PoolValidation((TaskValidation(MINI_TASK, None, nop),)), loaded, t1_version="t"),
        record,
    )
    spec = PoolSpec(source=str(root), validation=str(record))
    pool = load_one("pool", spec)
    assert [t.id for t in pool] == [MINI_TASK] and not pool.tasks[0].has_solution
    row = load_validation("pool", spec, pool).get(MINI_TASK)
    assert row is not None and row.verdict == "unproven" and row.oracle is None


@needs_bwrap
def test_eval_oracle_skips_the_task_without_solution_and_scores_the_other(tmp_path):
    root = _pool(tmp_path, solution=False)
    other = load_pool("builtin:mini").tasks[1]
    shutil.copytree(other.path, root / other.id)
    tiny = str(Path(__file__).resolve().parents[2] / "recipes" / "tiny-cpu.yaml")
    result = runner.invoke(
        app, ["eval", str(root), "--recipe", tiny, "--policy", "oracle", "--json", "evaluation.attempts=1"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout.strip().splitlines()[-1])
    assert (data["trials"], data["failed"], data["resolved_rate"]) == (1, 1, 1.0)
    assert data["failed_causes"] == {"no solution": 1}


def test_sft_leaves_out_a_task_without_solution_with_its_cause(tmp_path):
    # the expert of `t1 sft` is the reference solution: a bundle without one has none to replay
    from t1.run.sft import expert_conversations
    from t1_spec import load_recipe

    root = _pool(tmp_path, solution=False)
    recipe = load_recipe(
        Path(__file__).resolve().parents[2] / "recipes" / "tiny-learn.yaml",
        [f"sft.pool.source={root}", "sft.pool.limit=null", "sft.pool.tasks=null", "sft.pool.audit=null"],
    )
    rows, left_out = expert_conversations(recipe, tito=None)
    assert rows == [] and left_out == [
        f"{MINI_TASK}: no solution/solve.sh in its bundle, so no expert trajectory"
    ]


def _docker_ready() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        import docker

        docker.from_env().ping()
    except Exception:
        return False
    return True


@pytest.mark.docker
@pytest.mark.skipif(not _docker_ready(), reason="needs a Docker daemon")
def test_validate_with_the_docker_recipe_runs_a_bundle_without_solution(tmp_path):
    # the case found on Terminal-Bench 2 bundles: `--recipe recipes/tiny-docker.yaml` called them broken
    record = tmp_path / "record.json"
    docker_recipe = str(Path(__file__).resolve().parents[2] / "recipes" / "tiny-docker.yaml")
    result = runner.invoke(
        app,
        [
            "tasks",
            "validate",
            "--recipe",
            docker_recipe,
            str(_pool(tmp_path, solution=False)),
            "--record",
            str(record),
        ],
    )
    out = " ".join(result.output.split())
    assert result.exit_code == 1 and "broken bundle" not in out, result.output
    assert "not run (no solution/)" in out and "not proven solvable" in out
    row = json.loads(record.read_text())["tasks"][0]
    assert row["verdict"] == "unproven" and row["oracle"] is None and row["nop"]["network"] is False
