"""Each step's launched tasks are distinct, also across an epoch boundary, and no draw is lost (T1 §3)."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from t1_tasks import load_pool
from t1_tasks.pool import StepTasks, task_stream


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


def test_the_stream_walks_each_epochs_seeded_permutation_in_turn(pool6):
    # Independent expectation: epoch e's tasks are exactly Pool.epoch_order(e, seed), one epoch after another.
    first_three = list(itertools.islice(task_stream(pool6, 7), 18))
    want = [(e, t) for e in range(3) for t in pool6.epoch_order(e, 7)]
    assert first_three == want


def test_every_draw_keeps_the_epoch_it_was_met_in(pool6):
    # The loop reports each step's epochs from these pairs: a deferred draw keeps its epoch, runs first in the
    # next step, and no (epoch, task) pair is drawn twice or made up.
    steps = StepTasks(pool6, 0)
    seen = set()
    for _ in range(12):
        drawn = steps.draw(5)
        epochs = [e for e, _ in drawn]
        assert epochs == sorted(epochs)
        for epoch, task in drawn:
            assert task in pool6.epoch_order(epoch, 0)
            assert (epoch, task.id) not in seen
            seen.add((epoch, task.id))
    assert {e for e, _ in seen} == set(range(10))


def test_from_spec_follows_the_pool_sections_shuffle_and_seed(pool6):
    from t1_spec import PoolSpec

    shuffled = StepTasks.from_spec(pool6, PoolSpec(source="builtin:mini", shuffle_seed=3))
    assert shuffled.draw(6) == [(0, t) for t in pool6.epoch_order(0, 3)]
    listed = StepTasks.from_spec(pool6, PoolSpec(source="builtin:mini", shuffle="none"))
    assert listed.draw(4) + listed.draw(4) == [(0, t) for t in pool6.tasks] + [
        (1, t) for t in pool6.tasks[:2]
    ]


def test_tasks_held_by_continued_trials_are_not_drawn_and_their_epoch_turn_is_deferred_not_lost(pool6):
    # Partial-rollout continuation (T1 §10): a step continues 2 trials and draws 3 fresh tasks, none of the
    # 2 held; a draw of a held task waits for the next step, so each (epoch, task) pair is drawn exactly once.
    steps = StepTasks(pool6, 0)
    seen, held = [], frozenset()
    for _ in range(12):
        drawn = steps.draw(3, exclude=held)
        ids = [t.id for _, t in drawn]
        assert len(set(ids)) == 3 and not set(ids) & held
        seen += [(e, t.id) for e, t in drawn]
        held = frozenset(ids[:2])  # two of them are parked and continued in the next step
    assert len(seen) == len(set(seen)) == 36  # no pair twice, none made up
    per_epoch = Counter(e for e, _ in seen)
    assert all(per_epoch[e] == 6 for e in range(5))  # the first five epochs ran every task once


def test_a_step_whose_fresh_and_held_tasks_exceed_the_pool_is_refused(pool6):
    with pytest.raises(ValueError, match="4 distinct tasks besides 3 it already runs"):
        StepTasks(pool6, 0).draw(4, exclude=frozenset({"a", "b", "c"}))
