"""The recipe's evaluation section runs during a short training run and logs beside the PPO rows (T1 §6.3)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from t1.cli import app
from t1_tasks import load_pool

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.e2e
def test_a_training_run_with_evaluation_writes_an_evaluation_row(tmp_path):
    # the suite is the last mini task, the training pool the first five: disjoint, as T1 §3 requires
    suite = tmp_path / "suite"
    task = load_pool("builtin:mini").tasks[-1]
    shutil.copytree(task.path, suite / task.id)
    runs = tmp_path / "runs"
    result = CliRunner().invoke(
        app,
        [
            "train", str(REPO / "recipes/tiny-cpu.yaml"), f"logging.run_root={runs}", "ppo.steps=1",
            "pool.limit=5", "rollout.max_turns=1", "rollout.max_new_tokens=32",
            "evaluation.enabled=true", f"evaluation.suites=[{suite}]", "evaluation.every_steps=1",
            "evaluation.max_turns=1", "evaluation.attempts=1", "evaluation.context_tokens=4096",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (run,) = runs.iterdir()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["phase"] for r in rows] == ["ppo", "evaluation"]
    ev = rows[1]
    assert (ev["step"], ev["suite"], ev["weight_version"]) == (0, str(suite), 1)
    assert ev["trials"] + ev["failed"] == 1 and ev["tasks"] == 1
    for key in ("resolved_rate", "mean_reward", "pass_at_k", "turns_mean", "per_category", "per_difficulty"):
        assert key in ev
    assert f"evaluation after step 1 on {suite}" in result.output
