"""Each step's launched tasks are distinct, also across an epoch boundary, and no draw is lost."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from t1.training import StepTasks, task_stream
from t1_tasks import load_pool


@pytest.fixture(scope="module")
def pool6():
    return load_pool("builtin:mini", limit=6)


def test_a_step_across_an_epoch_boundary_never_repeats_a_task(pool6):
    # 5 of 6 per step: steps 2..6 all straddle a boundary; with seeded per-epoch shuffles, a plain stream
    # repeats a task within some step (the fresh user's case); the step sampler never does.
    plain = task_stream(pool6, 0)
    plain_steps = [[t.id for _, t in itertools.islice(plain, 5)] for _ in range(12)]
    assert any(len(set(s)) < 5 for s in plain_steps), "seed no longer exercises the case; pick another"
    steps = StepTasks(pool6, 0)
    for _ in range(12):
        assert len({t.id for _, t in steps.draw(5)}) == 5


def test_deferred_draws_are_kept_so_every_epoch_runs_every_task(pool6):
    steps = StepTasks(pool6, 0)
    drawn = Counter(t.id for _ in range(12) for _, t in steps.draw(5))  # 60 draws = 10 epochs of 6
    # a deferral only moves a draw to the next step: each task ran 10 times, give or take the one in waiting
    assert set(drawn) == {t.id for t in pool6}
    assert all(9 <= n <= 10 for n in drawn.values()) and sum(drawn.values()) == 60


def test_a_step_larger_than_the_pool_is_refused(pool6):
    with pytest.raises(ValueError, match="pool of 6"):
        StepTasks(pool6, 0).draw(7)


@pytest.mark.parametrize(("epochs", "steps", "want"), [(1, None, 1), (3, None, 5), (3, 2, 2), (3, 9, 5)])
def test_planned_steps_never_reach_into_a_pass_beyond_ppo_epochs(epochs, steps, want):
    from pathlib import Path

    from t1.training import Trainer
    from t1_spec import load_recipe

    # the mini pool's 9 tasks, 5 launched per step: one pass holds 1 whole step, three passes hold 5 (27 // 5)
    tiny = Path(__file__).resolve().parents[2] / "recipes" / "tiny-cpu.yaml"
    trainer = Trainer(
        load_recipe(tiny, [f"ppo.epochs={epochs}", f"ppo.steps={'null' if steps is None else steps}"]), {}
    )
    trainer.pool = load_pool("builtin:mini")
    assert len(trainer.pool) == 9
    assert trainer.planned_steps() == want
