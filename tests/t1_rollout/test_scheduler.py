import asyncio
from dataclasses import dataclass

import pytest

from t1_rollout.scheduler import SchedulerConfig, collect_batch
from t1_sandbox.token_bucket import TokenBucket


@dataclass(frozen=True)
class FakeTask:
    id: str
    category: str


class Listed:
    """A task source that launches exactly the given tasks, in order, all from epoch 0."""

    def __init__(self, tasks):
        self.tasks = list(tasks)

    def draw(self, n):
        assert n == len(self.tasks), f"the scheduler drew {n} of {len(self.tasks)}"
        return [(0, t) for t in self.tasks]


def _config(admitted, concurrency=8, *, launched):
    return SchedulerConfig(
        launched=launched,
        admitted=admitted,
        concurrency=concurrency,
        creation_rate_per_s=1000,
        creation_quota_per_min=60000,
    )


def _collect(tasks, run_one, admitted, **kw):
    return collect_batch(Listed(tasks), run_one, _config(admitted, launched=len(tasks), **kw))


async def test_admits_first_finished_and_cancels_the_tail():
    # 5 launched for a batch of 3: the two slowest are cancelled and their cleanup runs (T1 §7.4).
    delays = {"a": 0.01, "b": 0.02, "c": 0.03, "slow1": 5.0, "slow2": 5.0}
    cleaned = []

    async def run_one(task, record):
        try:
            await asyncio.sleep(delays[task.id])
            record.status = "finished"
            return record
        finally:
            cleaned.append(task.id)

    tasks = [FakeTask(k, "fast" if not k.startswith("slow") else "slow") for k in delays]
    batch = await _collect(tasks, run_one, 3)
    assert [r.task_id for r in batch.admitted] == ["a", "b", "c"]
    assert sorted(r.task_id for r in batch.cancelled) == ["slow1", "slow2"]
    assert all(r.status == "cancelled" for r in batch.cancelled)
    assert sorted(cleaned) == sorted(delays)  # every trial ran its cleanup before the batch returned
    assert batch.retention_by_family() == {"fast": 1.0, "slow": 0.0}


async def test_failed_trials_are_recorded_not_admitted():
    async def run_one(task, record):
        await asyncio.sleep(0.001)
        if task.id == "bad":
            record.status = "failed"
            record.cause = "sandbox_start: boom"
        else:
            record.status = "finished"
        return record

    tasks = [FakeTask("bad", "x"), FakeTask("ok1", "x"), FakeTask("ok2", "x")]
    batch = await _collect(tasks, run_one, 2)
    assert [r.task_id for r in batch.admitted] == ["ok1", "ok2"]
    assert [r.cause for r in batch.failed] == ["sandbox_start: boom"]


async def test_short_batch_when_too_few_finish():
    async def run_one(task, record):
        record.status = "failed"
        record.cause = "agent: x"
        return record

    batch = await _collect([FakeTask("t1", "x"), FakeTask("t2", "x")], run_one, 2)
    assert batch.admitted == [] and len(batch.failed) == 2


async def test_concurrency_cap_is_respected():
    running = 0
    peak = 0

    async def run_one(task, record):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1
        record.status = "finished"
        return record

    tasks = [FakeTask(f"t{i}", "x") for i in range(6)]
    await _collect(tasks, run_one, 6, concurrency=2)
    assert peak == 2


async def test_token_bucket_paces_creations():
    bucket = TokenBucket(rate=50.0, capacity=1)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    for _ in range(6):
        await bucket.acquire()
    # one token at start, then 5 more at 50/s: at least 0.1 s minus scheduling slack
    assert loop.time() - t0 >= 0.09


def test_launching_fewer_than_admitted_is_refused():
    with pytest.raises(ValueError, match="launch at least as many"):
        asyncio.run(_collect([FakeTask("a", "x")], None, 2))
