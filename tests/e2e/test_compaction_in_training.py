"""A short training run with a small compaction threshold records every summary attempt (T1 §9)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from t1.cli import app
from t1_rollout.compaction import CAUSES
from t1_tasks import load_pool

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.e2e
def test_a_run_with_a_small_threshold_shows_compaction_attempts_and_failures(tmp_path):
    # The threshold (64 tokens) is below every first prompt, so each trial asks for a summary after its first
    # turn; the random tiny model never writes one that ends within 32 tokens and fits under 64 tokens, so
    # each attempt fails, the episode ends, and the failures are counted, printed and recorded.
    suite = tmp_path / "suite"
    task = load_pool("builtin:mini").tasks[-1]
    shutil.copytree(task.path, suite / task.id)
    runs = tmp_path / "runs"
    result = CliRunner().invoke(
        app,
        [
            "train", str(REPO / "recipes/tiny-cpu.yaml"), f"logging.run_root={runs}", "ppo.steps=1",
            "pool.limit=2", "ppo.batch_size=2", "rollout.launched=2", "rollout.max_turns=2",
            "rollout.max_new_tokens=32", "rollout.compaction_threshold_tokens=64",
            "evaluation.enabled=true", f"evaluation.suites=[{suite}]", "evaluation.every_steps=1",
            "evaluation.max_turns=2", "evaluation.attempts=1", "evaluation.context_tokens=4096",
            "evaluation.compaction_threshold_tokens=64",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (run,) = runs.iterdir()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    step, ev = rows
    assert (step["phase"], ev["phase"]) == ("ppo", "evaluation")
    episodes = step["trials_launched"] - step["failures_by_stage"].get("sandbox_start", 0)
    # every trial that ran its first turn asked for exactly one summary, and every ask is counted
    trajectories = [json.loads(p.read_text()) for p in (run / "trajectories" / "step-0000").glob("*.json")]
    asked = sum(1 for t in trajectories if t["finish"] == "compaction_failed")
    assert step["compaction_attempts"] >= asked >= 1 and step["compaction_attempts"] <= episodes
    assert step["compaction_succeeded"] == 0
    assert step["compaction_failed"] == step["compaction_attempts"]
    assert set(step["compaction_failures"]) == set(CAUSES)
    assert sum(step["compaction_failures"].values()) == step["compaction_failed"]
    assert step["compaction_failures"]["token_cap"] + step["compaction_failures"]["too_long"] >= 1
    assert step["compaction_failure_rate"] == 1.0
    assert step["compaction_tokens_before_mean"] >= 64 and step["compaction_tokens_after_mean"] is None
    assert step["finish_reasons"].get("compaction_failed", 0) >= 1
    assert step["chunks_per_trajectory_max"] == 1  # no summary succeeded, so no trajectory was split
    # above rollout.compaction_max_failure_rate (0.1): recorded in the row and printed under the table
    assert "compaction attempts failed" in step["compaction_warning"]
    assert "warning:" in result.output and "compaction_max_failure_rate" in result.output
    assert "compact ok/fail" in result.output
    # the evaluation runs the same harness: its attempts are counted too
    assert ev["compaction_attempts"] >= 1 and ev["compaction_failed"] == ev["compaction_attempts"]
