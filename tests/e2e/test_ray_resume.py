"""`t1 train --resume` of a Ray run: tiny-ray asynchronous, 2 steps with a checkpoint every step, then 2 more.

The checkpoint after step 2 holds the batch of step 2, drawn by version 1 while step 1 trained (T1 Appendix
12). The resumed run trains that very batch at staleness 1, then goes on with the pipeline: every step after
the first trains at staleness 1, the weight versions follow on, and the rows continue in the same
``metrics.jsonl``. Asserted, since it holds by construction: the pipeline's bookkeeping (staleness, versions,
the samples' policy versions), that the first resumed step trains the saved batch (its rollout figures are
the buffer's), and that step 3 draws the tasks an uninterrupted task stream draws there. Not asserted:
equality with an uninterrupted 4-step run's losses and rewards, since which trials of an oversampled batch
are admitted depends on their timing (docs/distributed.md, "Checkpoints and resume").
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from typer.testing import CliRunner

from t1.cli import app

pytestmark = [pytest.mark.e2e, pytest.mark.ray]

RESUMABLE = ["trainer.checkpoint_every=1", "trainer.checkpoint_optimizer=true", "logging.print_table=false"]


def _task_ids(folder) -> Counter:
    return Counter(json.loads(p.read_text())["task_id"] for p in folder.glob("*.json"))


def test_async_run_resumed_after_two_steps_trains_the_saved_batch_at_staleness_one(
    tmp_path, monkeypatch, tiny_ray, no_ray_left, rows_of
):
    from t1.run.driver import Run
    from t1.run.pools import load_pools
    from t1_tasks import StepTasks
    from t1_tito import Sample

    run, summary = tiny_ray(tmp_path, [*RESUMABLE, "ppo.steps=2"])
    no_ray_left(run)
    run_dir = summary.run_dir
    ckpt = run_dir / "checkpoints" / "step-0002"
    state = json.loads((ckpt / "state" / "state.json").read_text())
    assert (state["ppo_steps"], state["weight_version"]) == (2, 2)
    assert state["rollout_buffer"]["steps"] == [2]
    buffer = [json.loads(line) for line in (ckpt / "state" / "rollout_buffer.jsonl").read_text().splitlines()]
    head, samples = buffer[0], [Sample.from_json(rec) for rec in buffer[1:]]
    # the batch rolled out while step 1 trained: drawn by version 1, to be trained at staleness 1
    assert head["index"] == 2 and head["staleness"] == 1 and samples
    assert {s.policy_version for s in samples} == {1}
    assert len(list((run_dir / "trajectories" / "step-0002").glob("*.json"))) == 3  # launched, not trained
    first = json.loads((run_dir / "checkpoints" / "step-0001" / "state" / "state.json").read_text())
    assert (first["weight_version"], first["rollout_buffer"]["steps"]) == (1, [1])  # within the plan, too

    resumed: list[Run] = []
    real_run = Run.run
    monkeypatch.setattr(Run, "run", lambda self: (resumed.append(self), real_run(self))[1])
    # a free field may change: one checkpoint after the resumed steps (each one is 553 MB on tiny-ray)
    result = CliRunner().invoke(
        app, ["train", "--resume", str(run_dir), "ppo.steps=4", "trainer.checkpoint_every=2"]
    )
    assert result.exit_code == 0, result.output
    assert f"resumed from {ckpt} after PPO step 2" in " ".join(result.output.split())
    (again,) = resumed  # the Ray runtime, picked from the run directory's recipe.yaml
    assert again.runtime.kind == "ray"
    no_ray_left(again)

    rows = rows_of(run_dir)
    assert [row["step"] for row in rows] == [0, 1, 2, 3]
    assert [row["staleness"] for row in rows] == [0, 1, 1, 1]
    assert [row["staleness_min"] for row in rows] == [0, 1, 1, 1]
    assert [sorted(set(row["policy_versions"])) for row in rows] == [[0], [0], [1], [2]]
    assert [row["weight_version_after"] for row in rows] == [1, 2, 3, 4]
    # step 2 trained the saved batch itself: its rollout figures are the buffer's
    assert {k: rows[2][k] for k in head["rollout_metrics"]} == head["rollout_metrics"]
    assert rows[2]["epochs"] == head["epochs"] and rows[2]["wall_s"]["rollout"] == head["rollout_s"]
    # step 3 drew what an uninterrupted task stream draws at its fourth batch (3 tasks a step)
    pool, _, _ = load_pools(again.recipe)
    stream = StepTasks.from_spec(pool, again.recipe.pool)
    fourth = [stream.draw(3) for _ in range(4)][3]
    assert _task_ids(run_dir / "trajectories" / "step-0003") == Counter(t.id for _, t in fourth)
    assert not (run_dir / "trajectories" / "superseded").exists()  # step 2's trajectories stay

    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "finished" and status["steps_completed"] == 4
    assert status["resumed_from"] == "checkpoints/step-0002"
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [f"step-000{k}" for k in (1, 2, 4)]
    last = json.loads((run_dir / "checkpoints" / "step-0004" / "state" / "state.json").read_text())
    # the last planned step's checkpoint holds step 4's batch too, so extending the run stays exact
    assert (last["ppo_steps"], last["weight_version"], last["rollout_buffer"]["steps"]) == (4, 4, [4])
    # the saved actor weights are a transformers state dict of the recipe's model
    from safetensors.torch import load_file
    from transformers.models.qwen3_5_moe import Qwen3_5MoeForCausalLM

    from t1_policy import hf_config_from_spec

    hf = Qwen3_5MoeForCausalLM(hf_config_from_spec(again.recipe.model))
    missing, unexpected = hf.load_state_dict(load_file(ckpt / "weights" / "actor.safetensors"), strict=False)
    assert unexpected == [] and set(missing) <= {"lm_head.weight"}
