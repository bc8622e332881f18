"""Checkpoints of the whole run state and ``t1 train --resume``: exact on the CPU, refused by name otherwise.

The exactness test runs tiny-cpu shortened (one trial a step, one at a time so the admitted order does not
depend on timing, one turn of 16 tokens): four PPO steps in one run, and two steps then a resume for two
more. Everything but timings must be equal, floats bit for bit: the resumed process loads the same weights,
optimizer states, counters, task order and RNG states, and every trial samples with a seed fixed by the
recipe seed, the step and its slot, so nothing is left to differ.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from t1.cli import app
from t1.run.resume import (
    STATE_VERSION,
    ResumeError,
    latest_checkpoint,
    open_run,
    recipe_identity,
)
from t1_spec import load_recipe
from t1_tasks import StepTasks, load_pool
from t1_trainer.rng import rng_state as _rng_state
from t1_trainer.rng import set_rng_state as _set_rng

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "recipes/tiny-cpu.yaml"
SHORT = [
    "ppo.batch_size=1",
    "rollout.launched=1",
    "rollout.concurrency=1",
    "rollout.max_turns=1",
    "rollout.max_new_tokens=16",
    # a verifier timed out at 60 s on a loaded box (deadlines nest verifier < agent < remote): not tested here
    "rollout.verifier_deadline_s=600",
    "rollout.agent_deadline_s=900",
    "rollout.remote_deadline_s=1800",
    "trainer.checkpoint_every=2",
    "trainer.checkpoint_optimizer=true",
    "logging.print_table=false",
]


def _train(args: list[str]) -> str:
    result = CliRunner().invoke(app, ["train", *args])
    assert result.exit_code == 0, result.output
    return result.output


def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _untimed(row: dict) -> dict:
    """The row less its timings (``wall_s`` and every ``*time_s``), which no two runs share."""
    return {k: v for k, v in row.items() if k != "wall_s" and not k.endswith("time_s")}


@pytest.mark.slow
@pytest.mark.e2e
def test_four_steps_equal_two_then_two_resumed(tmp_path):
    _train([str(TINY), *SHORT, "ppo.steps=4", f"logging.run_root={tmp_path / 'full'}"])
    _train([str(TINY), *SHORT, "ppo.steps=2", f"logging.run_root={tmp_path / 'part'}"])
    (full_dir,) = (tmp_path / "full").iterdir()
    (part_dir,) = (tmp_path / "part").iterdir()
    ckpt = json.loads((part_dir / "checkpoints" / "step-0002" / "state" / "state.json").read_text())
    assert ckpt["ppo_steps"] == 2 and ckpt["weight_version"] == 2
    assert ckpt["task_stream"] == {"epoch": 0, "offset": 2, "deferred": []}  # one task a step
    assert ckpt["backend_counters"]["actor_updates"] == 2
    assert ckpt["rollout_buffer"] == {"records": 0, "steps": []}
    output = _train(["--resume", str(part_dir), "ppo.steps=4"])

    full, resumed = _rows(full_dir), _rows(part_dir)
    assert [r["step"] for r in full] == [0, 1, 2, 3]
    assert [r["step"] for r in resumed] == [0, 1, 2, 3]
    # the comparison is not vacuous: the steps trained and the rows carry rewards and losses
    assert {"reward_mean", "critic/value_loss", "actor/policy_loss", "actor/grad_norm"} <= set(full[3])
    assert all(r["critic/value_loss"] > 0 and r["actor/grad_norm"] > 0 for r in full)
    assert [r["weight_version_after"] for r in resumed] == [1, 2, 3, 4]
    for a, b in zip(full, resumed, strict=True):
        assert _untimed(a) == _untimed(b), a["step"]
    for name in ("actor.safetensors", "critic.safetensors"):
        assert (full_dir / "weights" / name).read_bytes() == (part_dir / "weights" / name).read_bytes()
    status = json.loads((part_dir / "status.json").read_text())
    assert status["status"] == "finished" and status["steps_completed"] == 4
    assert status["resumed_from"] == "checkpoints/step-0002"
    assert "resumed from" in output
    assert (part_dir / "checkpoints" / "step-0004" / "state" / "state.json").is_file()


class _Engine:
    """The engine's side of a resume: a weight version and a paused publication."""

    def __init__(self) -> None:
        self.weight_version, self.paused, self.got = 0, False, None

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    def update_weights(self, state_dict, *, weight_version: int) -> None:
        assert self.paused
        self.got, self.weight_version = dict(state_dict), weight_version


class _Backend:
    """A trainer backend with the torch backend's attributes, on two small linear layers."""

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


def _saved_run(tmp_path: Path, overrides: tuple[str, ...] = ("trainer.checkpoint_optimizer=true",)):
    """A run directory with a recipe.yaml and one checkpoint after 3 steps of a `_Backend`."""
    import yaml

    from t1.run.resume import save_state

    recipe = load_recipe(TINY, list(overrides))
    resolved = recipe.model_dump(mode="json", by_alias=True)
    run = tmp_path / "run"
    run.mkdir(parents=True)
    (run / "recipe.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))
    (run / "metrics.jsonl").write_text('{"step": 0}\n{"step": 1}\n{"step": 2}\n')
    backend, engine = _Backend(seed=1), _Engine()
    backend.train(3)
    engine.weight_version = 3
    stream = StepTasks(load_pool("builtin:mini"), seed=0)
    stream.draw(4)
    save_state(
        run / "checkpoints" / "step-0003",
        recipe=recipe,
        resolved=resolved,
        backend=backend,
        engine=engine,
        stream=stream,
        ppo_steps=3,
        warmup_steps=0,
        metrics_rows=3,
    )
    return run, backend, stream


def test_restore_loads_weights_optimizers_counters_stream_and_rng(tmp_path):
    from t1.run.resume import load_state, restore, supersede_after

    run, saved, stream = _saved_run(tmp_path)
    want_rng = _rng_state()
    after = (random.random(), np.random.rand(), torch.rand(2).tolist())
    _, _, ckpt = open_run(run, ["ppo.steps=5"])
    assert ckpt == run / "checkpoints" / "step-0003"
    state = load_state(ckpt)
    assert (state.ppo_steps, state.weight_version, state.metrics_rows, state.rollout_buffer) == (3, 3, 3, [])
    fresh, engine = _Backend(seed=2), _Engine()
    s2 = StepTasks(load_pool("builtin:mini"), seed=0)
    torch.manual_seed(99)  # restore must put the saved generator states back, whatever ran since
    restore(state, backend=fresh, engine=engine, stream=s2)
    assert _rng_state()["torch"] == want_rng["torch"]
    assert (random.random(), np.random.rand(), torch.rand(2).tolist()) == after
    for a, b in ((saved.actor, fresh.actor), (saved.critic, fresh.critic)):
        for (n, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
            assert torch.equal(x, y), n
    for a, b in ((saved.actor_opt, fresh.actor_opt), (saved.critic_opt, fresh.critic_opt)):
        sa, sb = a.state_dict()["state"], b.state_dict()["state"]
        assert sa.keys() == sb.keys() and sa
        for k in sa:
            assert all(torch.equal(sa[k][f], sb[k][f]) for f in ("step", "exp_avg", "exp_avg_sq"))
    assert (fresh.actor_updates, fresh.version, fresh.policy_version) == (3, 3, 3)
    assert engine.weight_version == 3 and not engine.paused
    assert all(torch.equal(engine.got[k], v) for k, v in saved.export_weights().items())
    assert [t.id for _, t in s2.draw(3)] == [t.id for _, t in stream.draw(3)]
    # the rows a killed process wrote after the checkpoint move aside; the run's rows end at it
    with (run / "metrics.jsonl").open("a") as fh:  # an evaluation row after the checkpoint stays
        fh.write('{"phase": "evaluation", "step": 2}\n{"step": 3}\n{"st')
    (run / "trajectories" / "step-0003").mkdir(parents=True)
    (run / "trajectories" / "step-0002").mkdir(parents=True)
    assert supersede_after(run, state) == 2
    assert _rows(run) == [{"step": 0}, {"step": 1}, {"step": 2}, {"phase": "evaluation", "step": 2}]
    assert (run / "metrics.superseded.jsonl").read_text() == '{"step": 3}\n{"st'
    assert sorted(p.name for p in (run / "trajectories").iterdir()) == ["step-0002", "superseded"]


def _refused(args: list[str]) -> str:
    result = CliRunner().invoke(app, ["train", *args])
    assert result.exit_code == 2, result.output
    return " ".join(result.output.split())


def test_an_override_that_changes_the_run_is_refused_by_name(tmp_path):
    run, _, _ = _saved_run(tmp_path)
    out = _refused(["--resume", str(run), "ppo.steps=4", "rollout.max_new_tokens=8", "seed=3"])
    assert "rollout.max_new_tokens, seed" in out and "would change" in out
    out = _refused(["--resume", str(run), f"logging.run_root={tmp_path}"])
    assert "logging.run_root" in out
    out = _refused(["--resume", str(run), str(TINY)])
    assert "drop" in out and "tiny-cpu.yaml" in out
    assert "give a recipe YAML, or --resume RUN_DIR" in _refused([])
    assert _rows(run) == [{"step": 0}, {"step": 1}, {"step": 2}]  # nothing was written


def test_a_missing_corrupt_or_foreign_state_is_refused_naming_the_file(tmp_path):
    run, _, _ = _saved_run(tmp_path)
    state = run / "checkpoints" / "step-0003" / "state" / "state.json"
    text = state.read_text()

    state.write_text(text[:100])
    assert str(state) in _refused(["--resume", str(run)])

    state.write_text(text.replace(f'"version": {STATE_VERSION}', '"version": 99'))
    out = _refused(["--resume", str(run)])
    assert str(state) in out and "version 99" in out

    state.write_text(text)
    recipe = run / "recipe.yaml"
    original = recipe.read_text()
    recipe.write_text(original.replace("seed: 0", "seed: 5", 1))
    out = _refused(["--resume", str(run)])
    assert str(state) in out and "another recipe" in out
    recipe.write_text(original)

    state.unlink()
    out = _refused(["--resume", str(run)])
    assert str(run / "checkpoints") in out and "no checkpoint" in out

    shutil.rmtree(run / "checkpoints")
    assert "no checkpoint" in _refused(["--resume", str(run)])
    assert "no such directory" in _refused(["--resume", str(tmp_path / "nowhere")])
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "recipe.yaml" in _refused(["--resume", str(empty)])


def test_a_cut_file_or_a_state_without_optimizer_is_refused(tmp_path):
    from t1.run.resume import load_state

    run, _, _ = _saved_run(tmp_path)
    ckpt = latest_checkpoint(run)
    actor = ckpt / "weights" / "actor.safetensors"
    data = actor.read_bytes()
    actor.write_bytes(data[: len(data) // 2])
    with pytest.raises(ResumeError, match="actor.safetensors.*incomplete"):
        load_state(ckpt)
    actor.write_bytes(data)
    assert load_state(ckpt).ppo_steps == 3

    # the paper's setting saves no optimizer state: an exact resume is impossible, so it is refused
    plain, _, _ = _saved_run(tmp_path / "plain", overrides=())
    ckpt = latest_checkpoint(plain)
    assert not (ckpt / "state" / "optimizer.pt").exists()
    with pytest.raises(ResumeError, match="optimizer.pt.*checkpoint_optimizer"):
        load_state(ckpt)


def test_open_run_names_a_missing_folder_a_file_and_a_folder_that_is_not_a_run(tmp_path):
    with pytest.raises(ResumeError, match=r"missing: no such directory"):
        open_run(tmp_path / "missing", [])
    (tmp_path / "afile").write_text("")
    with pytest.raises(ResumeError, match=r"afile: not a directory"):
        open_run(tmp_path / "afile", [])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ResumeError, match=r"empty/recipe\.yaml: not found"):
        open_run(tmp_path / "empty", [])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "empty"]  # nothing created


def test_open_run_allows_only_the_free_fields(tmp_path):
    recipe = load_recipe(TINY)
    resolved = recipe.model_dump(mode="json", by_alias=True)
    import yaml

    run = tmp_path / "run"
    run.mkdir()
    (run / "recipe.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))
    # free fields pass the identity check (and then find no checkpoint)
    with pytest.raises(ResumeError, match="no checkpoint"):
        open_run(run, ["ppo.steps=9", "trainer.checkpoint_every=3", "logging.print_table=false"])
    with pytest.raises(ResumeError, match="ppo.actor_lr"):
        open_run(run, ["ppo.actor_lr=1e-3"])
    again = load_recipe(run / "recipe.yaml").model_dump(mode="json", by_alias=True)
    assert recipe_identity(again) == recipe_identity(resolved)
    longer = load_recipe(run / "recipe.yaml", ["ppo.steps=9"]).model_dump(mode="json", by_alias=True)
    assert recipe_identity(longer) == recipe_identity(resolved)
    other = load_recipe(run / "recipe.yaml", ["seed=1"]).model_dump(mode="json", by_alias=True)
    assert recipe_identity(other) != recipe_identity(resolved)


@pytest.mark.parametrize("first", [0, 3, 5, 6, 11])
def test_a_restored_task_stream_draws_what_the_original_would(first):
    pool = load_pool("builtin:mini")
    n = len(pool)
    a = StepTasks(pool, seed=7)
    # draw steps of n - 1 tasks: the epoch boundaries defer draws, so the position carries deferred tasks
    for _ in range(first):
        a.draw(n - 1)
    position = json.loads(json.dumps(a.position()))
    b = StepTasks(pool, seed=7)
    b.restore(position)
    for _ in range(2 * n):
        assert [(e, t.id) for e, t in a.draw(n - 1)] == [(e, t.id) for e, t in b.draw(n - 1)]


def test_task_stream_position_counts_epoch_and_offset_and_refuses_a_used_stream():
    pool = load_pool("builtin:mini")
    s = StepTasks(pool, seed=0)
    s.draw(4)
    s.draw(4)
    pos = s.position()
    # every task taken from the stream was handed out or deferred
    assert pos["epoch"] * len(pool) + pos["offset"] == 8 + len(pos["deferred"])
    with pytest.raises(ValueError, match="fresh"):
        s.restore(pos)
    with pytest.raises(ValueError, match="not-a-task"):
        StepTasks(pool, seed=0).restore({"epoch": 0, "offset": 0, "deferred": [[0, "not-a-task"]]})


def test_rng_states_round_trip_through_json():
    state = json.loads(json.dumps(_rng_state()))
    want = (random.random(), np.random.rand(), torch.rand(3).tolist())
    random.seed(123)
    np.random.seed(123)
    torch.manual_seed(123)
    _set_rng(state)
    assert (random.random(), np.random.rand(), torch.rand(3).tolist()) == want
