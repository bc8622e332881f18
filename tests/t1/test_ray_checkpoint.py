"""The Ray loop's checkpoints without a cluster: one format written from two processes, the buffered batch.

The trainer's part is written where the backend lives (`save_trainer_state`, the trainer worker) and the rest
by the driver (`save_state` with ``trainer=``); a resume reads one `RunState`. The asynchronous loop's batch
in flight goes into the rollout buffer and comes back as the same samples and the same row figures.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from t1.run.resume import (
    ResumeError,
    load_engines,
    load_state,
    restore_trainer,
    save_state,
    save_trainer_state,
    supersede_after,
)
from t1.run.steps import BUFFER_KIND, InFlight, buffered_batches
from t1_spec import load_recipe
from t1_tasks import StepTasks, load_pool
from t1_tito import Sample

REPO = Path(__file__).resolve().parents[2]
TINY_RAY = REPO / "recipes" / "tiny-ray.yaml"


class _Backend:
    """The torch backend's attributes on two small linear layers."""

    def __init__(self, seed: int) -> None:
        torch.manual_seed(seed)
        self.device = torch.device("cpu")
        self.actor, self.critic = torch.nn.Linear(4, 3), torch.nn.Linear(4, 1)
        self.actor_opt = torch.optim.AdamW(self.actor.parameters(), lr=1e-2)
        self.critic_opt = torch.optim.AdamW(self.critic.parameters(), lr=1e-2)
        self.actor_updates = self.version = self.policy_version = 0

    def export_weights(self):
        return {k: v.detach() for k, v in self.actor.state_dict().items()}

    def train(self, steps: int) -> None:
        for _ in range(steps):
            for model, opt in ((self.actor, self.actor_opt), (self.critic, self.critic_opt)):
                model(torch.randn(2, 4)).square().sum().backward()
                opt.step()
                opt.zero_grad()
            self.actor_updates += 1
            self.version += 1
            self.policy_version += 1


def _sample(trial: str, version: int, reward: float) -> Sample:
    mask = np.array([0, 0, 1, 1, 0, 1], dtype=np.int8)
    return Sample(
        token_ids=np.arange(6, dtype=np.int32) + 7,
        loss_mask=mask,
        rollout_logprobs=np.where(mask == 1, np.float32(-0.1234567), 0).astype(np.float32),
        routing=np.arange(5 * 2 * 2, dtype=np.uint8).reshape(5, 2, 2) % 4,
        reward=reward,
        reward_index=5,
        task_id=trial.split("__")[0],
        family="scripting",
        trial_id=trial,
        chunk_index=0,
        policy_version=version,
    )


class _Batch:
    """What `InFlight.of` reads of a `BatchResult`: its metrics, epochs and admitted trials."""

    epochs = [0, 1, 0]
    admitted = [object(), object()]

    def metrics(self, *, compaction_max_failure_rate):
        # a NaN and numpy scalars, as real metrics carry (an EV of constant returns, numpy means)
        return {"reward_mean": np.float64(0.25), "tito_drift_loss_region": math.nan, "samples": np.int64(2)}


def _in_flight(index: int = 2) -> InFlight:
    recipe = load_recipe(TINY_RAY)
    samples = [_sample("a__00000001", 1, 0.5), _sample("b__00000002", 1, 1.0)]
    return InFlight.of(_Batch(), samples, recipe=recipe, index=index, staleness=1, rollout_s=3.5, requeued=1)


def test_in_flight_figures_are_what_a_metrics_row_stores():
    flight = _in_flight()
    # the row's JSON conversion, done once: NaN -> null, numpy -> plain numbers, epochs sorted and unique
    assert flight.rollout_metrics == {"reward_mean": 0.25, "tito_drift_loss_region": None, "samples": 2}
    assert type(flight.rollout_metrics["samples"]) is int
    assert (flight.epochs, flight.admitted, flight.staleness) == ([0, 1], 2, 1)


def test_the_buffered_batch_comes_back_as_it_was():
    flight = _in_flight()
    records = json.loads(json.dumps(flight.to_records()))
    assert records[0]["kind"] == BUFFER_KIND and len(records) == 3
    back = InFlight.from_records(records, "rollout_buffer.jsonl")
    assert back.batch is None
    for name in ("index", "staleness", "epochs", "rollout_metrics", "admitted", "rollout_s", "requeued"):
        assert getattr(back, name) == getattr(flight, name), name
    for a, b in zip(flight.samples, back.samples, strict=True):
        assert a.trial_id == b.trial_id and a.policy_version == b.policy_version and a.reward == b.reward
        assert a.rollout_logprobs.tobytes() == b.rollout_logprobs.tobytes()
        assert np.array_equal(a.routing, b.routing) and a.routing.dtype == b.routing.dtype
    with pytest.raises(ResumeError, match="buf.jsonl: not a run's rollout buffer"):
        InFlight.from_records([{"kind": "other"}], "buf.jsonl")
    with pytest.raises(ResumeError, match="buf.jsonl: record 3"):
        InFlight.from_records([records[0], records[1], {**records[2], "reward_index": 3}], "buf.jsonl")


def _two_process_checkpoint(tmp_path: Path, flight: InFlight | None):
    """A Ray run's checkpoint after 2 steps: the trainer's part, then the driver's, as the loop does."""
    import yaml

    recipe = load_recipe(TINY_RAY, ["trainer.checkpoint_every=1", "trainer.checkpoint_optimizer=true"])
    resolved = recipe.model_dump(mode="json", by_alias=True)
    run = tmp_path / "run"
    run.mkdir()
    (run / "recipe.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))
    (run / "metrics.jsonl").write_text('{"step": 0}\n{"step": 1}\n')
    backend = _Backend(seed=1)
    backend.train(2)
    ckpt = run / "checkpoints" / "step-0002"
    part = json.loads(json.dumps(save_trainer_state(ckpt, backend, optimizer=True)))  # crosses Ray as data
    stream = StepTasks(load_pool("builtin:mini"), seed=0)
    stream.draw(3)
    save_state(
        ckpt,
        recipe=recipe,
        resolved=resolved,
        trainer=part,
        weight_version=2,
        stream=stream,
        ppo_steps=2,
        warmup_steps=0,
        metrics_rows=2,
        rollout_buffer=flight.to_records() if flight else (),
        buffered_steps=[flight.index] if flight else (),
    )
    return run, ckpt, backend, part


def test_a_checkpoint_written_from_two_processes_is_one_run_state(tmp_path):
    run, ckpt, saved, part = _two_process_checkpoint(tmp_path, _in_flight())
    assert set(part["files"]) == {
        "weights/actor.safetensors",
        "weights/critic.safetensors",
        "state/optimizer.pt",
    }
    payload = json.loads((ckpt / "state" / "state.json").read_text())
    assert payload["rollout_buffer"] == {"records": 3, "steps": [2]}
    assert payload["backend_counters"] == {"actor_updates": 2, "version": 2, "policy_version": 2}
    assert payload["rng"] == part["rng"]  # the trainer process's generators
    state = load_state(ckpt)  # every file at its recorded size, the buffer included
    assert (state.ppo_steps, state.weight_version, state.buffered_steps) == (2, 2, [2])
    assert InFlight.from_records(state.rollout_buffer, "buf").index == 2

    fresh = _Backend(seed=5)
    restore_trainer(state, fresh)
    for a, b in ((saved.actor, fresh.actor), (saved.critic, fresh.critic)):
        assert all(
            torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
        )
    assert fresh.actor_opt.state_dict()["state"][0]["step"] == 2
    assert (fresh.actor_updates, fresh.policy_version) == (2, 2)

    # the buffered step's trajectories were rolled out before the checkpoint: they stay; later ones move
    for step in (1, 2, 3):
        (run / "trajectories" / f"step-{step:04d}").mkdir(parents=True)
    with (run / "metrics.jsonl").open("a") as fh:
        fh.write('{"step": 2}\n')
    assert supersede_after(run, state) == 1
    assert sorted(p.name for p in (run / "trajectories").iterdir()) == [
        "step-0001",
        "step-0002",
        "superseded",
    ]


def test_the_driver_refuses_a_trainer_file_it_cannot_see(tmp_path):
    recipe = load_recipe(TINY_RAY)
    part = {"files": {"weights/actor.safetensors": 10}, "backend_counters": {}, "rng": {}}
    with pytest.raises(RuntimeError, match="does not see it.*shared storage"):
        save_state(
            tmp_path / "ckpt",
            recipe=recipe,
            resolved=recipe.model_dump(mode="json", by_alias=True),
            trainer=part,
            weight_version=1,
            stream=StepTasks(load_pool("builtin:mini"), seed=0),
            ppo_steps=1,
            warmup_steps=0,
            metrics_rows=1,
        )
    assert not (tmp_path / "ckpt" / "state" / "state.json").exists()
    with pytest.raises(ValueError, match="one of each"):
        save_state(
            tmp_path, recipe=recipe, resolved={}, stream=None, ppo_steps=1, warmup_steps=0, metrics_rows=0
        )


def test_a_buffered_batch_of_another_step_is_refused_before_anything_loads(tmp_path):
    _, ckpt, _, _ = _two_process_checkpoint(tmp_path, _in_flight(index=5))
    with pytest.raises(ResumeError, match=r"holds the batches of steps \[5\].*resumes at step 2"):
        buffered_batches(load_state(ckpt), ckpt)


class _Receiver:
    def __init__(self, version: int, fail: bool = False) -> None:
        self.weight_version, self.fail, self.calls = version, fail, []

    def pause(self) -> None:
        self.calls.append("pause")

    def resume(self) -> None:
        self.calls.append("resume")

    def update_weights(self, state_dict, *, weight_version: int) -> None:
        self.calls.append("update")
        if self.fail:
            raise RuntimeError("replica gone")
        self.weight_version = weight_version


def test_restored_weights_reach_every_engine_under_the_saved_version():
    backend = _Backend(seed=0)
    backend.policy_version = 4
    fresh, current = _Receiver(0), _Receiver(4)
    assert load_engines(backend, [fresh, current], 4) > 0
    # the version does not advance (unlike a publication) and the one already there is left alone
    assert (fresh.weight_version, current.weight_version, backend.policy_version) == (4, 4, 4)
    assert fresh.calls == ["pause", "update", "resume"] and current.calls == []
    # every paused receiver resumes even when an update fails
    a, b = _Receiver(0), _Receiver(0, fail=True)
    with pytest.raises(RuntimeError, match="replica gone"):
        load_engines(backend, [a, b], 4)
    assert a.calls == ["pause", "update", "resume"] and b.calls == ["pause", "update", "resume"]


def test_the_trainer_worker_saves_and_restores_its_backend_in_its_own_process(tmp_path):
    """`TrainerWorker` is plain Python; Ray only places it. Its part of a checkpoint round-trips."""
    from safetensors.torch import load_file
    from transformers.models.qwen3_5_moe import Qwen3_5MoeForCausalLM

    from t1.run.ray.actors import TrainerWorker
    from t1_policy import hf_config_from_spec

    recipe = load_recipe(TINY_RAY, ["trainer.checkpoint_every=1", "trainer.checkpoint_optimizer=true"])
    trained, fresh = TrainerWorker(recipe), TrainerWorker(recipe)
    b = trained.backend
    for model, opt in (
        (b.actor, b.actor_opt),
        (b.critic, b.critic_opt),
    ):  # one update moves weights and moments
        sum(p.float().square().sum() for p in model.parameters() if p.requires_grad).backward()
        opt.step()
        opt.zero_grad()
    b.policy_version = 3
    ckpt = tmp_path / "checkpoints" / "step-0003"
    part = trained.save_checkpoint(str(ckpt), True)
    stream = StepTasks(load_pool("builtin:mini"), seed=0)
    save_state(
        ckpt,
        recipe=recipe,
        resolved=recipe.model_dump(mode="json", by_alias=True),
        trainer=part,
        weight_version=3,
        stream=stream,
        ppo_steps=3,
        warmup_steps=0,
        metrics_rows=3,
    )
    assert fresh.restore_checkpoint(load_state(ckpt)) == 3
    for a, c in ((b.actor, fresh.backend.actor), (b.critic, fresh.backend.critic)):
        for (name, x), (_, y) in zip(a.state_dict().items(), c.state_dict().items(), strict=True):
            assert torch.equal(x, y), name
    moments = fresh.backend.actor_opt.state_dict()["state"]
    assert moments and all(int(s["step"]) == 1 for s in moments.values())
    # the actor file is a transformers state dict of the recipe's model (tied embeddings stored once)
    hf = Qwen3_5MoeForCausalLM(hf_config_from_spec(recipe.model))
    saved = load_file(ckpt / "weights" / "actor.safetensors")
    missing, unexpected = hf.load_state_dict(saved, strict=False)
    assert unexpected == [] and set(missing) <= {"lm_head.weight"}
    assert torch.equal(
        hf.state_dict()["model.embed_tokens.weight"], b.export_weights()["model.embed_tokens.weight"]
    )
