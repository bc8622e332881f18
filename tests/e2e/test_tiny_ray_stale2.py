"""`recipes/tiny-ray-stale2.yaml` on a local Ray cluster: rollout up to two versions ahead of training.

With ``runtime.max_staleness: 2`` the batches of steps 0 and 1 are drawn by version 0 before any training,
then the batch of step t + 2 by version t while step t trains (`t1.run.staleness`): the steps train at
staleness 0, 1, 2, 2, the trainer accepts each (it refuses anything older than 2), publication stays one
barrier per step, and every row carries the staleness histogram.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

STALE2 = Path(__file__).resolve().parents[2] / "recipes" / "tiny-ray-stale2.yaml"

pytestmark = [pytest.mark.e2e, pytest.mark.ray]


def test_rollout_two_versions_ahead_trains_at_staleness_up_to_two(tmp_path, tiny_ray, no_ray_left, rows_of):
    run, summary = tiny_ray(tmp_path, [], STALE2)
    assert summary.steps == 4
    assert json.loads((summary.run_dir / "status.json").read_text())["status"] == "finished"
    rows = rows_of(summary.run_dir)
    assert [row["step"] for row in rows] == [0, 1, 2, 3]
    assert [row["staleness"] for row in rows] == [0, 1, 2, 2]
    assert [row["staleness_min"] for row in rows] == [0, 1, 2, 2]
    # steps 0 and 1 were rolled out before any training, step 2's while step 0 trained, step 3's while 1 did
    assert [sorted(set(row["policy_versions"])) for row in rows] == [[0], [0], [0], [1]]
    assert [row["weight_version_after"] for row in rows] == [1, 2, 3, 4]
    assert all(row["publish_objects"] == 1 for row in rows)  # one publication barrier per version
    for step, row in enumerate(rows):
        histogram = {k: v for k, v in row.items() if k.startswith("rollout/staleness_")}
        expected = {f"rollout/staleness_{j}": 0 for j in range(3)}
        expected[f"rollout/staleness_{min(step, 2)}"] = row["trainer/samples"]
        assert histogram == expected
        files = list((summary.run_dir / "trajectories" / f"step-{step:04d}").glob("*.json"))
        assert len(files) == row["trials_launched"] == 3
    no_ray_left(run)
