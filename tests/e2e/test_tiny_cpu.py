"""`t1 train recipes/tiny-cpu.yaml` end to end, shortened to one PPO step (issue 2's main job)."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from t1.cli import app

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.e2e
def test_tiny_cpu_one_step_writes_the_run_directory(tmp_path):
    result = CliRunner().invoke(
        app,
        ["train", str(REPO / "recipes/tiny-cpu.yaml"), "ppo.steps=1", f"logging.run_root={tmp_path}"],
    )
    assert result.exit_code == 0, result.output
    (run,) = tmp_path.iterdir()
    assert (run / "recipe.yaml").is_file()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1
    row = rows[0]
    # the oversampling scheduler launched 5 trials for a batch of 4 (T1 §7.4 at small scale)
    assert row["trials_launched"] == 5
    assert (
        row["trials_admitted"]
        + row["trials_failed"]
        + row["trials_cancelled"]
        + (row["trials_finished"] - row["trials_admitted"])
        == 5
    )
    assert row["trials_admitted"] >= 1
    # TITO: the loss region is exactly what the sampler emitted (T1 §4.1)
    assert row["tito_drift_loss_region"] == 0.0
    # every sample was drawn by the policy of this step, and publishing advanced the engine's version
    assert set(row["policy_versions"]) == {0}
    assert row["weight_version_after"] == 1
    # replaying the recorded routing on identical weights leaves (almost) no train-inference gap (T1 §4.2)
    assert row["actor/logprob_gap_replay"] < 1e-3
    assert row["samples_aborted_routing"] == 0
    for key in (
        "reward_mean",
        "assertions_passed_mean",
        "fallbacks",
        "parse_failure_rate",
        "turns_mean",
        "tokens_mean",
        "critic/explained_variance",
        "chunks_split",
    ):
        assert key in row
    trajectories = list((run / "trajectories" / "step-0000").glob("*.json"))
    assert len(trajectories) == 5
    admitted = [json.loads(p.read_text()) for p in trajectories]
    assert all(t["status"] in {"finished", "failed", "cancelled"} for t in admitted)
    assert any((run / "verifier").iterdir())
    assert (run / "weights" / "actor.safetensors").stat().st_size > 0
    assert (run / "weights" / "critic.safetensors").stat().st_size > 0


@pytest.mark.e2e
def test_invalid_recipe_fails_before_any_work(tmp_path):
    result = CliRunner().invoke(
        app, ["train", str(REPO / "recipes/tiny-cpu.yaml"), "ppo.clip_eps=-1", f"logging.run_root={tmp_path}"]
    )
    assert result.exit_code == 2
    assert "ppo.clip_eps" in result.output
    assert not any(tmp_path.iterdir())  # no run directory was created
