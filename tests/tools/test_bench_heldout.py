"""The held-out benchmark's plumbing (tools/bench/bench_heldout.py): the split it reuses or refuses, the
checkpoints it evaluates, and the per-task figures it reads from `t1 eval --json`."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    sys.path.insert(0, str(ROOT / "tools" / "bench"))
    spec = importlib.util.spec_from_file_location(
        "bench_heldout", ROOT / "tools" / "bench" / "bench_heldout.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bh = _bench()


def test_split_is_written_once_reused_and_a_different_one_refused(tmp_path):
    dirs = bh.ensure_split(tmp_path, ["text", "csv"], 3, 2, 0)
    assert len(list(dirs["train"].iterdir())) == 3 and len(list(dirs["heldout"].iterdir())) == 2
    before = (tmp_path / "split.json").stat().st_mtime_ns
    assert bh.ensure_split(tmp_path, ["text", "csv"], 3, 2, 0) == dirs
    assert (tmp_path / "split.json").stat().st_mtime_ns == before
    with pytest.raises(SystemExit, match="a split of other settings"):
        bh.ensure_split(tmp_path, ["text", "csv"], 3, 2, 1)


def test_checkpoints_and_final_weights_are_listed_by_step(tmp_path):
    for step in (5, 10):
        (tmp_path / "checkpoints" / f"step-{step:04d}" / "weights").mkdir(parents=True)
        (tmp_path / "checkpoints" / f"step-{step:04d}" / "weights" / "actor.safetensors").write_bytes(b"")
    (tmp_path / "checkpoints" / "step-0015").mkdir()  # no weights: an unfinished checkpoint is skipped
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "actor.safetensors").write_bytes(b"")
    got = [s for s, _ in bh.checkpoints(tmp_path, 12)]
    assert got == [5, 10, 12]
    assert [s for s, _ in bh.checkpoints(tmp_path, 10)] == [5, 10]  # the final weights are step 10's


def test_per_task_means_over_finished_attempts_only():
    rows = [
        {"task_id": "a", "status": "finished", "resolved": True, "reward": 0.4},
        {"task_id": "a", "status": "finished", "resolved": False, "reward": 0.1},
        {"task_id": "b", "status": "failed", "resolved": False, "reward": None},
        {"task_id": "c", "status": "finished", "resolved": False, "reward": None},
    ]
    data = {
        "resolved_rate": 1 / 3,
        "mean_reward": 0.25,
        "pass_at_k": {"1": 0.25},
        "failed": 1,
        "trial_rows": rows,
    }
    out = bh.eval_figures(data)
    assert out["per_task"] == {"a": {"resolved": 0.5, "reward": 0.25}, "c": {"resolved": 0.0, "reward": None}}
    assert out["failed"] == 1 and out["resolved"] == 1 / 3


def test_unknown_arm_and_too_many_sft_tasks_refused():
    with pytest.raises(SystemExit):
        bh.parse_args(["--arms", "ppo-critic,nope"])
    with pytest.raises(SystemExit):
        bh.parse_args(["--train", "4", "--sft-tasks", "5"])
    args = bh.parse_args(["--arms", "grpo,shuffled", "--seeds", "0,1,2"])
    assert args.arm_list == ["grpo", "shuffled"] and args.seed_list == [0, 1, 2]


def test_every_arm_is_a_recipe_t1_train_accepts(tmp_path):
    from t1_spec import load_recipe

    dirs = bh.ensure_split(tmp_path, ["csv"], 2, 1, 0)
    common = ["seed=1", "pool.tasks=null", "model.init=random", "model.checkpoint=null"]
    recipe = ROOT / "recipes" / "tiny-learn.yaml"
    for arm in bh.ARMS:
        spec = load_recipe(recipe, bh.arm_overrides(recipe, arm, common, dirs["train"], 4, 2))
        assert spec.pool.source == str(dirs["train"]) and spec.ppo.steps == 4
        assert spec.trainer.checkpoint_every == 2 and spec.seed == 1
        if arm == "grpo":
            assert spec.ppo.advantage.estimator == "grpo"
            assert spec.ppo.advantage.group_size == spec.ppo.samples_per_task
            assert not spec.critic_warmup.enabled


def test_sft_subset_takes_the_drawn_round_robin_order_not_the_sorted_one(tmp_path):
    bh.ensure_split(tmp_path, ["text", "csv", "files"], 6, 1, 0)
    order = bh.sft_order(tmp_path)
    assert sorted(order) == sorted(p.name for p in (tmp_path / "train").iterdir())
    # the first three are one of each family: a sorted order would take csv tasks first
    assert {t.split("-")[1] for t in order[:3]} == {"text", "csv", "files"}


def test_split_only_writes_the_split_and_runs_nothing_else(tmp_path):
    assert bh.main(["--out", str(tmp_path), "--train", "3", "--heldout", "1", "--split-only"]) == 0
    assert (tmp_path / "split" / "split.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["split"]  # no SFT, run or rows
