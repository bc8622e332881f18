"""collect_batch's on_trial_done: each trial is reported as it ends, in the order it is taken in."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from t1_rollout.scheduler import SchedulerConfig, collect_batch


@dataclass(frozen=True)
class FakeTask:
    id: str
    category: str


class Listed:
    def __init__(self, tasks):
        self.tasks = list(tasks)

    def draw(self, n):
        return [(0, t) for t in self.tasks[:n]]


async def test_each_ended_trial_is_reported_once_and_the_cancelled_tail_never():
    delays = {"a": 0.01, "b": 0.05, "boom": 0.02, "slow": 5.0}
    seen: list[tuple[str, str]] = []

    async def run_one(task, record):
        await asyncio.sleep(delays[task.id])
        record.status = "failed" if task.id == "boom" else "finished"
        return record

    config = SchedulerConfig(
        launched=4, admitted=2, concurrency=4, creation_rate_per_s=1000, creation_quota_per_min=60000
    )
    tasks = [FakeTask(k, "x") for k in delays]
    batch = await collect_batch(
        Listed(tasks), run_one, config, on_trial_done=lambda r: seen.append((r.task_id, r.status))
    )
    # in the order they ended: a, then the failure, then b fills the batch; the slow tail is cancelled
    assert seen == [("a", "finished"), ("boom", "failed"), ("b", "finished")]
    assert [r.task_id for r in batch.cancelled] == ["slow"]
