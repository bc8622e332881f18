"""The step driver's own pipeline (`t1.run.driver.Run._run_steps`) over a fake runtime, without a model.

Each PPO step must train the batch rolled out for it, at the staleness it was drawn for (trainer version
minus the drawing version), with at most k batches rolled out ahead, in sync mode (k = 0) and in the
asynchronous one (k = 1, 2, 3); a checkpoint due after the last step holds the next step's batch.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from t1.run.driver import Run
from t1.run.run_dir import RunDir
from t1.run.runtime import Publication, RunInputs, Trained
from t1.run.steps import BUFFER_KIND, InFlight, RunSummary
from t1_spec import load_recipe
from t1_tasks import load_pool

REPO = Path(__file__).resolve().parents[2]
TINY_RAY = REPO / "recipes" / "tiny-ray.yaml"


class FakeRuntime:
    """Trains at once, publishes by counting versions; records what each step trained."""

    kind = "fake"
    start_wall_s: dict[str, float] = {}

    def __init__(self) -> None:
        self.version = 0
        self.trained: list[tuple[int, int, int]] = []  # (batch index, tagged staleness, actual staleness)
        self.saved: list[dict] = []

    def describe(self) -> str:
        return ""

    def train_ppo(self, samples, *, staleness, continuation_lag, max_staleness):
        ages = {self.version - s.policy_version for s in samples}
        assert len(ages) == 1 and max(ages) <= max_staleness
        self.trained.append((samples[0].index, staleness, ages.pop()))
        return Trained({"trainer/policy_version": self.version, "staleness": staleness}, 0.0)

    def publish(self) -> Publication:
        self.version += 1
        return Publication(version=self.version, wall_s={"publish": 0.0})

    def row_extras(self, step, batch, publication):
        return {}

    def checkpoint_parts(self, checkpoint):
        self.saved.append({"checkpoint": checkpoint.name, "version": self.version})
        return {"trainer": None}


def _run(
    tmp_path: Path, overrides: list[str], monkeypatch, resume: tuple[int, list[InFlight]] | None = None
) -> tuple[FakeRuntime, list[tuple[int, int]]]:
    """Run the driver's PPO steps; ``resume``: (the step a checkpoint followed, its buffered batches)."""
    recipe = load_recipe(TINY_RAY, [*overrides, f"logging.run_root={tmp_path}"])
    run = Run.__new__(Run)  # the driver without its preflight and runtime start (no Ray, no model)
    run.recipe, run.resume_from, run.resolved = recipe, None, {}
    run.console = Console(file=io.StringIO())
    run.stop = SimpleNamespace(check=lambda: None)
    run.progress = SimpleNamespace(phase=lambda *a: None, step_done=lambda: None)
    run.runtime = fake = FakeRuntime()
    run.continuation = None
    pool = load_pool("builtin:mini")
    run.inputs = RunInputs(pool, pool, recipe.pool)
    run.rundir = RunDir.create(tmp_path, recipe.name, {"name": recipe.name})
    drawn: list[tuple[int, int]] = []  # (batch index, drawing version) in rollout order
    fake.park_tail = {}  # batch index -> whether its tail was parked

    def collect(stream, index, *, label=None, staleness=0, carry=True, park_tail=True):
        drawn.append((index, fake.version))
        fake.park_tail[index] = park_tail
        sample = SimpleNamespace(policy_version=fake.version, index=index, to_json=dict)
        metrics = {"trials_launched": 3, "trials_finished": 2, "trials_failed": 0, "trials_cancelled": 1}
        return InFlight(index, [sample], staleness, [0], metrics, admitted=2, rollout_s=0.0)

    run._collect = collect
    monkeypatch.setattr("t1.run.driver.Run._evaluate", lambda *a: None)
    saved = {}

    def save_state(checkpoint, **kwargs):
        saved[checkpoint.name] = kwargs["buffered_steps"]
        saved[checkpoint.name + "/records"] = kwargs["rollout_buffer"]

    monkeypatch.setattr("t1.run.resume.save_state", save_state)
    summary = RunSummary(run_dir=tmp_path)
    if resume is not None:  # as `_resume` leaves it: the trainer at the saved version, the buffer read back
        step, held = resume
        fake.version = step
        summary.steps = step
        monkeypatch.setattr(Run, "_resume", lambda self, summary, stream: held)
        run.resume_from = tmp_path / "checkpoints" / f"step-{step:04d}"
    run._run_steps(summary)
    fake.saved = saved
    return fake, drawn


@pytest.mark.parametrize("k", [0, 1, 2, 3])
def test_every_step_trains_its_own_batch_at_the_staleness_it_was_drawn_for(tmp_path, monkeypatch, k):
    mode = ["runtime.mode=sync"] if k == 0 else ["runtime.mode=async", f"runtime.max_staleness={k}"]
    fake, drawn = _run(tmp_path, [*mode, "ppo.steps=5"], monkeypatch)
    assert [t[0] for t in fake.trained] == [0, 1, 2, 3, 4]  # each step its own batch, in order
    assert all(tag == age for _, tag, age in fake.trained)
    assert [t[1] for t in fake.trained] == [min(s, k) for s in range(5)]
    assert [i for i, _ in drawn] == [0, 1, 2, 3, 4]  # nothing rolled out beyond the plan
    rows = [json.loads(line) for line in (next(tmp_path.glob("tiny-ray-*")) / "metrics.jsonl").open()]
    assert [r["weight_version_after"] for r in rows] == [1, 2, 3, 4, 5]
    histogram = {key for r in rows for key in r if key.startswith("rollout/staleness_")}
    assert histogram == {f"rollout/staleness_{j}" for j in range(k + 1)} if k else histogram == set()


def test_a_checkpoint_after_the_last_step_holds_the_next_batch(tmp_path, monkeypatch):
    fake, drawn = _run(
        tmp_path, ["runtime.mode=async", "ppo.steps=2", "trainer.checkpoint_every=1"], monkeypatch
    )
    assert [i for i, _ in drawn] == [0, 1, 2]  # step 2's batch, rolled out while the last step trained
    assert (fake.saved["step-0001"], fake.saved["step-0002"]) == ([1], [2])


@pytest.mark.parametrize("k", [2, 3])
def test_a_checkpoint_holds_every_batch_in_flight_and_a_resume_trains_them_as_tagged(
    tmp_path, monkeypatch, k
):
    overrides = ["runtime.mode=async", f"runtime.max_staleness={k}", "trainer.checkpoint_every=2"]
    fake, _ = _run(tmp_path / "a", [*overrides, "ppo.steps=4"], monkeypatch)
    # after step 1 the batches of steps 2 .. 2 + k - 1 are in flight; after step 3, 4 .. 4 + k - 1
    assert fake.saved["step-0002"] == list(range(2, 2 + k))
    assert fake.saved["step-0004"] == list(range(4, 4 + k))
    uninterrupted = [t[1:] for t in _run(tmp_path / "b", [*overrides, "ppo.steps=6"], monkeypatch)[0].trained]

    from t1.run.resume import RunState

    state = RunState.__new__(RunState)
    # the buffer's batch records (the fake samples are no TITO samples: left out, put back below)
    records = [r for r in fake.saved["step-0004/records"] if r.get("kind") == BUFFER_KIND]
    state.rollout_buffer, state.ppo_steps, state.buffered_steps = records, 4, list(range(4, 4 + k))
    from t1.run.steps import buffered_batches

    held = buffered_batches(state, tmp_path)
    assert [(b.index, b.staleness) for b in held] == [(4 + j, min(4 + j, k)) for j in range(k)]
    for b in held:  # the fake samples' versions, as the uninterrupted run drew them
        b.samples = [SimpleNamespace(policy_version=b.index - b.staleness, index=b.index, to_json=dict)]
    resumed, drawn = _run(tmp_path / "c", [*overrides, "ppo.steps=6"], monkeypatch, resume=(4, held))
    assert [t[0] for t in resumed.trained] == [4, 5]
    assert [t[1:] for t in resumed.trained] == uninterrupted[4:]  # the same staleness as without the stop
    assert all(index >= 4 + k for index, _ in drawn)  # nothing the buffer held is rolled out again


@pytest.mark.parametrize("k", [0, 1, 2])
def test_the_batch_a_checkpoint_follows_cancels_its_tail_instead_of_parking_it(tmp_path, monkeypatch, k):
    """A parked trial's live sandbox cannot be saved: the rollout that ends before a checkpoint holds none."""
    mode = ["runtime.mode=sync"] if k == 0 else ["runtime.mode=async", f"runtime.max_staleness={k}"]
    fake, _ = _run(tmp_path, [*mode, "ppo.steps=6", "trainer.checkpoint_every=2"], monkeypatch)
    # the checkpoints follow steps 1, 3 and 5; the batch rolled out while each of them trained is the last
    # rollout before that checkpoint (in sync mode the step's own batch, else the batch of step + k)
    before_checkpoint = {s + k for s in (1, 3, 5)}
    assert {i for i, parked in fake.park_tail.items() if not parked} == before_checkpoint
