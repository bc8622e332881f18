"""Bounded staleness of the asynchronous loop (`t1.run.staleness`): which version draws each batch.

The loop's bookkeeping is replayed against a fake trainer whose version advances by one per step: every batch
must be trained at exactly the staleness it was tagged with (trainer version minus the version that drew it),
at most k batches are ever rolled out ahead, and k = 1 reproduces the one-step loop (0, then 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from t1.run.runtimes import runtime_problems
from t1.run.staleness import (
    advance,
    batch_staleness,
    fill_pipeline,
    lookahead,
    staleness_histogram,
    staleness_problems,
)
from t1_spec import RecipeError, load_recipe

REPO = Path(__file__).resolve().parents[2]
TINY_RAY = REPO / "recipes" / "tiny-ray.yaml"
STALE2 = REPO / "recipes" / "tiny-ray-stale2.yaml"


@dataclass
class Batch:
    index: int
    drawn_by: int
    staleness: int


def replay(k: int, steps: int, start: int = 0) -> list[tuple[int, int, int, int]]:
    """The driver's order of rollout and training (`t1.run.driver.Run._run_steps`), with a version counter.

    Returns per step: (step, batch index, trained staleness tag, trainer version - drawing version).
    """
    version, in_flight_max, rows = start, 0, []

    def collect(_stream, index, staleness=0):
        return Batch(index, version, staleness)

    batch, queued = fill_pipeline(collect, None, start, steps, k)
    for step in range(start, steps):
        in_flight_max = max(in_flight_max, 1 + len(queued))
        rolled = collect(None, step + k, staleness=k) if step + k < steps else None  # during training
        rows.append((step, batch.index, batch.staleness, version - batch.drawn_by))
        batch = advance(queued, rolled) if queued else rolled
        version += 1  # the barrier's publication
    assert batch is None and not queued  # nothing left over
    assert in_flight_max <= k
    return rows


@pytest.mark.parametrize("k", [1, 2, 3, 8])
def test_every_batch_trains_at_the_staleness_it_was_tagged_with(k):
    rows = replay(k, steps=12)
    assert [r[1] for r in rows] == list(range(12))  # steps train their own batches, in order
    assert all(tag == age for _, _, tag, age in rows)
    assert [r[2] for r in rows] == [min(s, k) for s in range(12)]


def test_k_one_is_the_one_step_loop():
    assert [r[2] for r in replay(1, steps=4)] == [0, 1, 1, 1]


def test_a_resumed_pipeline_ramps_again_from_its_start():
    assert [r[2] for r in replay(2, steps=6, start=3)] == [0, 1, 2]


def test_fewer_steps_than_k_roll_out_only_the_planned_batches():
    assert [r[1:3] for r in replay(8, steps=3)] == [(0, 0), (1, 1), (2, 2)]


def test_batch_staleness_refuses_a_step_before_the_start():
    assert batch_staleness(5, 2, 2) == 2
    with pytest.raises(ValueError, match="before the pipeline's start"):
        batch_staleness(1, 2, 2)


def test_lookahead_is_zero_in_sync_mode():
    assert lookahead(load_recipe(TINY_RAY)) == 1
    assert lookahead(load_recipe(STALE2)) == 2
    assert lookahead(load_recipe(TINY_RAY, ["runtime.mode=sync"])) == 0


def test_histogram_has_every_staleness_up_to_the_bound():
    samples = [SimpleNamespace(policy_version=v) for v in (3, 3, 4)]
    assert staleness_histogram(lookahead(load_recipe(STALE2)), samples, 5) == {
        "rollout/staleness_0": 0,
        "rollout/staleness_1": 1,
        "rollout/staleness_2": 2,
    }
    # a sample the trainer would refuse still shows, under its own key
    assert staleness_histogram(2, [SimpleNamespace(policy_version=0)], 5)["rollout/staleness_5"] == 1
    assert staleness_histogram(0, samples[:1], 3) == {"rollout/staleness_0": 1}


def test_max_staleness_is_at_least_one():
    assert load_recipe(TINY_RAY).runtime.max_staleness == 1
    with pytest.raises(RecipeError, match="runtime.max_staleness"):
        load_recipe(TINY_RAY, ["runtime.max_staleness=0"])


def test_the_runtime_preflight_refuses_what_does_nothing():
    assert staleness_problems(load_recipe(STALE2)) == []
    assert runtime_problems(load_recipe(STALE2)) == []
    (line,) = staleness_problems(load_recipe(STALE2, ["runtime.mode=sync"]))
    assert line.startswith("runtime.max_staleness 2: only runtime.mode async")
    # a checkpoint holds every batch in flight (up to k): checkpoints run at any k
    assert runtime_problems(load_recipe(STALE2, ["trainer.checkpoint_every=1"])) == []
    assert staleness_problems(load_recipe(TINY_RAY, ["trainer.checkpoint_every=1"])) == []
