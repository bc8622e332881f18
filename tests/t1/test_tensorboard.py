"""TensorBoard event files beside metrics.jsonl: every scalar of every row, read back by TensorBoard."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from t1.run import preflight
from t1.run.run_dir import RunDir
from t1.run.tensorboard import scalars
from t1_spec import load_recipe

TINY = Path(__file__).resolve().parents[2] / "recipes" / "tiny-cpu.yaml"
REAL_ROW = json.loads((Path(__file__).parent / "data" / "tiny_cpu_metrics.jsonl").read_text().splitlines()[0])


def _accumulator(folder: Path) -> EventAccumulator:
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})  # 0: keep every event
    acc.Reload()
    return acc


def test_nested_rows_flatten_to_slash_tags_and_non_scalars_are_left_out():
    row = {
        "phase": "ppo",
        "step": 3,
        "reward_mean": 0.25,
        "wall_s": {"rollout": 2.0, "step": 3.5},
        "fallbacks": {"no_report": 1},
        "policy_versions": [0, 0],
        "compaction_warning": None,
        "note": "text",
        "critic/explained_variance": math.nan,
    }
    assert dict(scalars(row)) == {
        "reward_mean": 0.25,
        "wall_s/rollout": 2.0,
        "wall_s/step": 3.5,
        "fallbacks/no_report": 1.0,
    }


def test_event_file_holds_every_scalar_of_a_real_row_at_its_step(tmp_path):
    run = RunDir.create(tmp_path, "r", {"name": "r"}, tensorboard=True)
    second = {**REAL_ROW, "step": 1, "reward_mean": 0.5}
    run.append_metrics(REAL_ROW)
    run.append_metrics(second)
    run.append_metrics({"phase": "critic_warmup", "step": 0, "critic/explained_variance": -33.6})
    run.tensorboard.close()

    acc = _accumulator(run.root / "tensorboard")
    tags = set(acc.Tags()["scalars"])
    # every finite number of the row, nested ones included, and nothing else (independent walk of the row)
    expected = {k for k, v in REAL_ROW.items() if isinstance(v, int | float) and k not in ("step",)}
    expected |= {
        f"{k}/{s}" for k, v in REAL_ROW.items() if isinstance(v, dict) for s in v if v[s] is not None
    }
    assert expected <= tags
    assert {"wall_s/rollout", "retention_by_family/debugging", "actor/logprob_gap_replay"} <= tags
    reward = [(e.step, e.value) for e in acc.Scalars("reward_mean")]
    assert reward == [(0, pytest.approx(REAL_ROW["reward_mean"])), (1, 0.5)]
    ev = acc.Scalars("critic/explained_variance")
    assert [e.step for e in ev] == [0, 1]  # the warm-up row has its own tag, not a second step 0
    assert acc.Scalars("critic_warmup/critic/explained_variance")[0].value == pytest.approx(-33.6)
    assert json.loads(run.metrics_path.read_text().splitlines()[1])["reward_mean"] == 0.5  # the record stays


def test_every_row_is_on_disk_before_the_writer_is_closed(tmp_path):
    # a run killed mid-way keeps its steps: each row is flushed as it is written
    run = RunDir.create(tmp_path, "r", {"name": "r"}, tensorboard=True)
    run.append_metrics({"phase": "ppo", "step": 0, "reward_mean": 0.125})
    assert _accumulator(run.root / "tensorboard").Scalars("reward_mean")[0].value == 0.125


def test_no_event_files_unless_asked(tmp_path):
    run = RunDir.create(tmp_path, "r", {"name": "r"})
    run.append_metrics({"phase": "ppo", "step": 0, "reward_mean": 0.1})
    assert run.tensorboard is None and not (run.root / "tensorboard").exists()


def test_train_no_longer_refuses_tensorboard():
    assert preflight(load_recipe(TINY, ["logging.tensorboard=true"])).problems == ()
