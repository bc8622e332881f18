"""GRPO groups in the scheduler: G trials a task, whole groups admitted, each waits on its slowest member."""

import asyncio
from dataclasses import dataclass

import pytest

from t1_rollout.scheduler import SchedulerConfig, collect_batch
from t1_spec import load_recipe


@dataclass(frozen=True)
class FakeTask:
    id: str
    category: str = "x"


class Listed:
    def __init__(self, tasks):
        self.tasks = list(tasks)
        self.asked = []

    def draw(self, n):
        self.asked.append(n)
        return [(0, t) for t in self.tasks[:n]]


def _config(*, launched, admitted, g, concurrency=16):
    return SchedulerConfig(
        launched=launched,
        admitted=admitted,
        concurrency=concurrency,
        creation_rate_per_s=1000,
        creation_quota_per_min=60000,
        samples_per_task=g,
    )


def _runner(delays, fail=()):
    """A trial takes ``delays[(task, member)]`` seconds; ``fail`` lists the (task, member) that fail."""
    cleaned = []

    async def run_one(task, record):
        member = record.launch_index % 2
        try:
            await asyncio.sleep(delays[(task.id, member)])
            if (task.id, member) in fail:
                record.status, record.cause = "failed", "sandbox_start: boom"
            else:
                record.status = "finished"
            return record
        finally:
            cleaned.append(record.trial_id)

    return run_one, cleaned


async def test_each_task_gets_g_trials_with_their_own_launch_slots():
    source = Listed([FakeTask("a"), FakeTask("b")])
    run_one, _ = _runner({(t, m): 0.001 for t in "ab" for m in (0, 1)})
    batch = await collect_batch(source, run_one, _config(launched=4, admitted=4, g=2))
    assert source.asked == [2]  # launched / G tasks drawn
    assert [r.task_id for r in batch.admitted] == ["a", "a", "b", "b"]
    assert [r.launch_index for r in batch.admitted] == [0, 1, 2, 3]  # distinct slots: distinct seeds
    assert len({r.trial_id for r in batch.admitted}) == 4
    assert (batch.groups_admitted, batch.groups_dropped, batch.samples_per_task) == (2, 0, 2)
    assert batch.epochs == [0, 0]


async def test_a_group_closes_on_its_slowest_member_and_whole_groups_are_admitted():
    # a's first member finishes first but its second is the slowest trial of all; b and c close before it,
    # so with room for 2 groups the batch is b and c, and a's straggler is cancelled (T1 §9, §7.4)
    delays = {("a", 0): 0.001, ("a", 1): 5.0, ("b", 0): 0.02, ("b", 1): 0.03, ("c", 0): 0.04, ("c", 1): 0.05}
    run_one, cleaned = _runner(delays)
    source = Listed([FakeTask("a"), FakeTask("b"), FakeTask("c")])
    batch = await collect_batch(source, run_one, _config(launched=6, admitted=4, g=2))
    assert [r.task_id for r in batch.admitted] == ["b", "b", "c", "c"]
    assert [r.task_id for r in batch.finished_late] == ["a"]  # finished, but its group never closed
    assert [(r.task_id, r.status) for r in batch.cancelled] == [("a", "cancelled")]
    assert len(cleaned) == 6  # every sandbox reclaimed before the batch returned
    m = batch.metrics()
    assert (m["trials_admitted"], m["groups_admitted"], m["samples_per_task"]) == (4, 2, 2)


async def test_a_failed_member_drops_its_group_whole_and_cancels_its_siblings():
    # c's first member fails at once: its sibling (still running) is cancelled then, not waited for; the
    # batch then waits for a's slow member, since a group closes only when its slowest member ends
    delays = {("a", 0): 0.001, ("a", 1): 0.3, ("b", 0): 0.02, ("b", 1): 0.03, ("c", 0): 0.01, ("c", 1): 5.0}
    run_one, cleaned = _runner(delays, fail={("c", 0)})
    source = Listed([FakeTask("a"), FakeTask("b"), FakeTask("c")])
    batch = await asyncio.wait_for(collect_batch(source, run_one, _config(launched=6, admitted=4, g=2)), 4.0)
    assert [r.task_id for r in batch.admitted] == ["b", "b", "a", "a"]
    assert [r.cause for r in batch.failed] == ["sandbox_start: boom"]
    assert (batch.groups_admitted, batch.groups_dropped) == (2, 1)
    (sibling,) = batch.cancelled
    assert (sibling.task_id, sibling.status) == ("c", "cancelled")
    assert sibling.cause.startswith("scheduler: cancelled, its group lost c__")
    assert len(cleaned) == 6
    assert batch.metrics()["trials_dropped_with_group"] == len(batch.dropped) == 0


async def test_finished_members_of_a_group_that_lost_one_are_kept_but_never_admitted():
    delays = {("a", 0): 0.001, ("a", 1): 0.02, ("b", 0): 0.03, ("b", 1): 0.04}
    run_one, _ = _runner(delays, fail={("a", 1)})
    batch = await collect_batch(
        Listed([FakeTask("a"), FakeTask("b")]), run_one, _config(launched=4, admitted=2, g=2)
    )
    assert [r.task_id for r in batch.admitted] == ["b", "b"]
    assert [(r.task_id, r.status) for r in batch.dropped] == [("a", "finished")]
    assert batch.retention_by_family() == {"x": 0.5}
    m = batch.metrics()
    assert (m["trials_dropped_with_group"], m["groups_dropped"], m["trials_finished"]) == (1, 1, 3)


async def test_on_trial_done_sees_every_trial_the_scheduler_takes_in():
    seen = []
    run_one, _ = _runner({(t, m): 0.001 for t in "ab" for m in (0, 1)})
    source = Listed([FakeTask("a"), FakeTask("b")])
    await collect_batch(source, run_one, _config(launched=4, admitted=4, g=2), on_trial_done=seen.append)
    assert sorted(r.launch_index for r in seen) == [0, 1, 2, 3]


def test_trial_counts_must_be_whole_groups():
    with pytest.raises(ValueError, match="not a multiple of samples_per_task 2"):
        _config(launched=5, admitted=4, g=2)
    with pytest.raises(ValueError, match="samples_per_task must be >= 1"):
        _config(launched=4, admitted=4, g=0)


def test_the_recipe_builds_groups_from_ppo_samples_per_task():
    from pathlib import Path

    recipe = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "tiny-grpo.yaml")
    config = SchedulerConfig.from_spec(recipe.rollout, samples_per_task=recipe.ppo.samples_per_task)
    assert (config.launched, config.admitted, config.samples_per_task) == (6, 4, 2)
