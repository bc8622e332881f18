"""`recipes/tiny-ray-dp2.yaml`: two data-parallel trainer ranks on a local Ray cluster, and the loss of one.

The two ranks form one gloo process group and train every step together, each its two samples packed into
one micro-batch; rank 0 publishes and checkpoints. Each metrics row carries the group's size and the
publication's bytes, and the one-step asynchronous loop keeps its staleness (T1 Appendix 12). A rank killed
mid-step (SIGKILL the moment the step is submitted to the ranks) fails the run with that rank's cause well
within the collective deadline (T1 §7.3: Ray answers the dead actor's call, and the surviving rank's
collective fails when gloo sees the peer's socket close), leaves no Ray process behind, and
``t1 train --resume`` continues from the last checkpoint on a fresh group.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from t1.cli import app

pytestmark = [pytest.mark.e2e, pytest.mark.ray]

DP2 = Path(__file__).resolve().parents[2] / "recipes" / "tiny-ray-dp2.yaml"


def test_two_ranks_train_the_async_loop_and_rank_zero_publishes(tmp_path, tiny_ray, no_ray_left, rows_of):
    run, summary = tiny_ray(tmp_path, ["trainer.save_final_weights=true"], recipe_path=DP2)
    assert summary.steps == 2
    rows = rows_of(summary.run_dir)
    assert [row["trainer/ranks"] for row in rows] == [2, 2]
    assert [row["staleness"] for row in rows] == [0, 1]
    assert [row["weight_version_after"] for row in rows] == [1, 2]
    assert [row["trainer/samples"] for row in rows] == [4, 4]  # the whole batch, over both ranks
    # one object put per publication, from rank 0: the actor's weights, their bytes and seconds in the row
    actor = (summary.run_dir / "weights" / "actor.safetensors").stat().st_size
    for row in rows:
        assert row["publish_objects"] == 1 and row["wall_s"]["publish"] > 0
        assert 0.9 * actor < row["publish_bytes"] < 1.1 * actor
    assert len(run.runtime.actor_pids) == 5  # 2 replicas, 1 host, 2 trainer ranks
    no_ray_left(run)


def test_a_rank_killed_mid_step_fails_the_run_with_its_cause_and_resume_continues(
    tmp_path, monkeypatch, no_ray_left, rows_of
):
    pytest.importorskip("ray", reason="the ray package (t1[ray] extra) is not installed")
    from t1.run.driver import Run
    from t1.run.ray.trainer_group import TrainerGroup, TrainerRankLost
    from t1_spec import load_recipe

    submitted = TrainerGroup.ppo_step
    killed: list[tuple[int, float]] = []

    def ppo_step(self, samples, **kwargs):
        pending = submitted(self, samples, **kwargs)
        if kwargs["staleness"] == 1 and not killed:  # step 1: the step after the first checkpoint
            os.kill(self.pids[1], signal.SIGKILL)
            killed.append((self.pids[1], time.monotonic()))
        return pending

    monkeypatch.setattr(TrainerGroup, "ppo_step", ppo_step)
    overrides = [
        "trainer.checkpoint_every=1",
        "trainer.checkpoint_optimizer=true",
        f"logging.run_root={tmp_path}",
    ]
    recipe = load_recipe(DP2, overrides)
    run = Run(recipe, recipe.model_dump(mode="json", by_alias=True))
    with pytest.raises(TrainerRankLost) as raised:
        run.run()
    ended = time.monotonic()
    (pid, at) = killed[0]
    message = str(raised.value)
    assert f"rank 1 (pid {pid}) died" in message and "the PPO step" in message
    assert ended - at < recipe.liveness.collective_timeout_s  # no hang: within the collective deadline
    no_ray_left(run)
    run_dir = run.rundir.root
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "failed" and f"rank 1 (pid {pid}) died" in status["message"]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step-0001"]

    monkeypatch.setattr(TrainerGroup, "ppo_step", submitted)
    result = CliRunner().invoke(app, ["train", "--resume", str(run_dir)])
    assert result.exit_code == 0, result.output
    assert "after PPO step 1" in " ".join(result.output.split())
    rows = rows_of(run_dir)
    assert [row["step"] for row in rows] == [0, 1]
    assert [row["trainer/ranks"] for row in rows] == [2, 2]
    assert [row["staleness"] for row in rows] == [0, 1]
    assert [row["weight_version_after"] for row in rows] == [1, 2]
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "finished" and status["resumed_from"] == "checkpoints/step-0001"
