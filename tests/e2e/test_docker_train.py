"""`t1 train recipes/tiny-docker.yaml` end to end on a real Docker daemon, shortened to one small PPO step."""

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from t1.cli import app
from t1_sandbox.docker import DockerSandbox
from t1_sandbox.docker import client as dc
from t1_spec import load_recipe

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "tiny-docker.yaml"


@pytest.mark.e2e
@pytest.mark.docker
def test_one_step_on_docker_sandboxes_scores_trials_and_leaves_no_container(tmp_path):
    problems = DockerSandbox.preflight(load_recipe(RECIPE))
    if problems:
        pytest.skip("; ".join(problems))
    result = CliRunner().invoke(
        app,
        [
            "train", str(RECIPE), "ppo.steps=1", "ppo.batch_size=2", "rollout.launched=2", "pool.limit=2",
            "rollout.max_turns=2", "rollout.max_new_tokens=32", f"logging.run_root={tmp_path}",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (run,) = tmp_path.iterdir()
    (row,) = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert row["trials_launched"] == 2
    # every trial reached its verifier in a container: none failed at sandbox start
    assert row["failures_by_stage"].get("sandbox_start", 0) == 0
    assert row["trials_admitted"] >= 1
    labels = ["t1.sandbox=docker", f"t1.pid={os.getpid()}"]
    assert not dc.api_client(None).containers(all=True, filters={"label": labels})  # all removed
