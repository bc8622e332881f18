"""`recipes/tiny-ray.yaml` on a local Ray cluster: the one-step asynchronous loop, the sync mode, teardown.

The asynchronous loop of T1 Appendix 12 trains step 0 at staleness 0 and every later step at exactly 1,
advances the weight version by one per step, and publishes one object to every replica. Every Ray process
the run started is gone after it, finished or failed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from t1_spec import load_recipe

REPO = Path(__file__).resolve().parents[2]
TINY_RAY = REPO / "recipes" / "tiny-ray.yaml"

pytestmark = [pytest.mark.e2e, pytest.mark.ray]


def test_async_loop_trains_at_staleness_one_after_the_first_step(tmp_path, tiny_ray, no_ray_left, rows_of):
    run, summary = tiny_ray(tmp_path, ["trainer.save_final_weights=true"])
    assert summary.steps == 3
    status = json.loads((summary.run_dir / "status.json").read_text())
    assert status["status"] == "finished"
    rows = rows_of(summary.run_dir)
    assert [row["step"] for row in rows] == [0, 1, 2]
    # T1 Appendix 12: step 0 trains the batch of version 0 at staleness 0; step t >= 1 trains the batch
    # that version t - 1 drew while step t - 1 trained, one publication behind the trainer.
    assert [row["staleness"] for row in rows] == [0, 1, 1]
    assert [row["staleness_min"] for row in rows] == [0, 1, 1]
    assert [sorted(set(row["policy_versions"])) for row in rows] == [[0], [0], [1]]
    assert [row["weight_version_after"] for row in rows] == [1, 2, 3]
    # one object-store put per publication, whatever the number of replicas; its time is reported
    assert all(row["publish_objects"] == 1 for row in rows)
    assert all(row["wall_s"]["publish"] > 0 for row in rows)
    # both replicas served generation (least-loaded routing of new trajectories)
    assert len(rows[-1]["replica_requests"]) == 2
    assert min(rows[-1]["replica_requests"]) > 0
    # trajectory files in the embedded loop's layout: one per launched trial of every step
    for step in range(3):
        files = list((summary.run_dir / "trajectories" / f"step-{step:04d}").glob("*.json"))
        assert len(files) == rows[step]["trials_launched"] == 3
    assert (summary.run_dir / "weights" / "actor.safetensors").stat().st_size > 0
    no_ray_left(run)


def test_sync_mode_on_ray_trains_at_staleness_zero(tmp_path, tiny_ray, no_ray_left, rows_of):
    run, summary = tiny_ray(tmp_path, ["runtime.mode=sync", "ppo.steps=2"])
    rows = rows_of(summary.run_dir)
    # rollout, then training, then publication: every sample drawn by the trainer's own version
    assert [row["staleness"] for row in rows] == [0, 0]
    assert [sorted(set(row["policy_versions"])) for row in rows] == [[0], [1]]
    assert [row["weight_version_after"] for row in rows] == [1, 2]
    no_ray_left(run)


def test_a_failed_run_leaves_no_ray_process(tmp_path, monkeypatch, no_ray_left):
    from t1.run.driver import Run

    def broken(self, *args, **kwargs):
        raise RuntimeError("injected failure once every actor is up")

    monkeypatch.setattr(Run, "_run_steps", broken)
    pytest.importorskip("ray", reason="the ray package (t1[ray] extra) is not installed")
    recipe = load_recipe(TINY_RAY, ["ppo.steps=1", f"logging.run_root={tmp_path}"])
    run = Run(recipe, recipe.model_dump(mode="json", by_alias=True))
    from t1.run.ray.placement import session_processes

    with pytest.raises(RuntimeError) as raised:
        run.run()
    if "did not start" in str(raised.value):
        assert session_processes() == ()  # a failed start leaves nothing behind either
        pytest.skip(f"a local Ray cluster cannot start on this machine: {raised.value}")
    assert "injected failure" in str(raised.value)
    (run_dir,) = tmp_path.iterdir()
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "failed" and "injected failure" in status["message"]
    no_ray_left(run)
