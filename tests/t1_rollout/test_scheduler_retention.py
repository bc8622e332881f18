"""Retention by family, trajectory length and reward: what the cancelled tail drops (T1 §10)."""

import asyncio
import json
from dataclasses import dataclass

import pytest

from t1_reward import RewardResult
from t1_rollout.harness import Episode
from t1_rollout.retention import (
    OUTCOMES,
    REWARD_BUCKETS,
    length_bucket,
    retention_table,
    reward_bucket,
    trial_tokens,
    trial_turns,
)
from t1_rollout.scheduler import BatchResult, SchedulerConfig, collect_batch
from t1_rollout.trial import TrialRecord
from t1_tito import Turn


@dataclass(frozen=True)
class FakeTask:
    id: str
    category: str


class Listed:
    def __init__(self, tasks):
        self.tasks = list(tasks)

    def draw(self, n):
        assert n == len(self.tasks)
        return [(0, t) for t in self.tasks]


def _turn(n_out: int) -> Turn:
    return Turn(prompt_ids=[1, 2], output_ids=[3] * n_out, output_logprobs=[-0.1] * n_out, policy_version=0,
                finish_reason="stop")  # fmt: skip


def _episode(*outs: int, summaries: tuple[int, ...] = ()) -> Episode:
    return Episode(turns=[_turn(n) for n in outs], summary_turns=list(summaries))


def _reward(value: float) -> RewardResult:
    return RewardResult(value=value, passed=0, total=0, binary=None, fallback=None, kind="dense")


def _record(name: str, family: str, status: str, episode=None, reward=None) -> TrialRecord:
    return TrialRecord(
        trial_id=name, task_id=name, family=family, status=status, episode=episode, reward=reward
    )


ZERO = dict.fromkeys(OUTCOMES, 0)


def test_length_buckets_are_powers_of_two():
    # 2**k .. 2**(k+1) - 1, by hand
    got = {n: length_bucket(n) for n in (0, 1, 2, 3, 4, 7, 8, 15, 16, 1000, 1024)}
    assert got == {
        0: "0",
        1: "1",
        2: "2-3",
        3: "2-3",
        4: "4-7",
        7: "4-7",
        8: "8-15",
        15: "8-15",
        16: "16-31",
        1000: "512-1023",
        1024: "1024-2047",
    }
    with pytest.raises(ValueError, match="count >= 0"):
        length_bucket(-1)


def test_reward_buckets_keep_zero_apart_and_unscored_last():
    assert REWARD_BUCKETS == ("0", "0-0.25", "0.25-0.5", "0.5-0.75", "0.75-1", ">1", "unscored")
    got = [reward_bucket(v) for v in (0.0, 0.05, 0.25, 0.26, 0.75, 1.0, 1.05, None)]
    assert got == ["0", "0-0.25", "0-0.25", "0.25-0.5", "0.5-0.75", "0.75-1", ">1", "unscored"]
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="finite number >= 0"):
            reward_bucket(bad)


def test_turns_leave_summaries_out_and_tokens_count_every_sampled_token():
    rec = _record("t", "x", "finished", episode=_episode(5, 7, 11, summaries=(1,)))
    assert trial_turns(rec) == 2  # the summary turn is no action (T1 §9)
    assert trial_tokens(rec) == 23  # 5 + 7 + 11: the summary was sampled too
    assert trial_turns(_record("c", "x", "cancelled")) == trial_tokens(_record("c", "x", "cancelled")) == 0


def test_every_outcome_is_counted_in_its_bucket():
    batch = BatchResult(
        admitted=[
            _record("k1", "easy", "finished", _episode(10), _reward(0.5)),
            _record("k2", "easy", "finished", _episode(10, 10), _reward(0.0)),
        ],
        finished_late=[_record("l", "hard", "finished", _episode(*[100] * 5), _reward(1.2))],
        cancelled=[
            _record("c1", "hard", "cancelled", _episode(*[300] * 9)),  # cancelled at 9 turns, 2700 tokens
            _record("c2", "hard", "cancelled"),  # cancelled before its sandbox started
        ],
        failed=[_record("f", "easy", "failed", _episode(40))],
        dropped=[_record("d", "easy", "finished", _episode(10), _reward(0.0))],
        launched=7,
    )
    m = batch.metrics()
    assert m["retention_by_family_outcome"] == {
        "easy": {"launched": 4, **ZERO, "kept": 2, "failed": 1, "dropped": 1, "retention": 0.5},
        "hard": {"launched": 3, **ZERO, "finished_late": 1, "cancelled": 2, "retention": 0.0},
    }
    assert m["retention_by_family_outcome"]["easy"]["retention"] == m["retention_by_family"]["easy"]
    assert m["retention_by_turns"] == {
        "0": {"launched": 1, **ZERO, "cancelled": 1, "retention": 0.0},
        "1": {"launched": 3, **ZERO, "kept": 1, "failed": 1, "dropped": 1, "retention": 1 / 3},
        "2-3": {"launched": 1, **ZERO, "kept": 1, "retention": 1.0},
        "4-7": {"launched": 1, **ZERO, "finished_late": 1, "retention": 0.0},
        "8-15": {"launched": 1, **ZERO, "cancelled": 1, "retention": 0.0},
    }
    assert m["retention_by_tokens"] == {
        "0": {"launched": 1, **ZERO, "cancelled": 1, "retention": 0.0},
        "8-15": {"launched": 2, **ZERO, "kept": 1, "dropped": 1, "retention": 0.5},
        "16-31": {"launched": 1, **ZERO, "kept": 1, "retention": 1.0},
        "32-63": {"launched": 1, **ZERO, "failed": 1, "retention": 0.0},
        "256-511": {"launched": 1, **ZERO, "finished_late": 1, "retention": 0.0},
        "2048-4095": {"launched": 1, **ZERO, "cancelled": 1, "retention": 0.0},
    }
    # cancelled and failed trials have no reward: the unscored row, never a reward of 0
    assert m["retention_by_reward"] == {
        "0": {"launched": 2, **ZERO, "kept": 1, "dropped": 1, "retention": 0.5},
        "0.25-0.5": {"launched": 1, **ZERO, "kept": 1, "retention": 1.0},
        ">1": {"launched": 1, **ZERO, "finished_late": 1, "retention": 0.0},
        "unscored": {"launched": 3, **ZERO, "cancelled": 2, "failed": 1, "retention": 0.0},
    }
    for key in ("retention_by_family_outcome", "retention_by_turns", "retention_by_tokens"):
        assert sum(row["launched"] for row in m[key].values()) == batch.launched
    json.dumps(m)


def test_an_unknown_outcome_is_refused():
    with pytest.raises(ValueError, match="unknown trial outcome 'lost'"):
        retention_table([("lost", _record("x", "x", "failed"))], lambda r: r.family)


def test_an_empty_batch_has_empty_tables():
    m = BatchResult().metrics()
    tables = (
        "retention_by_family_outcome",
        "retention_by_turns",
        "retention_by_tokens",
        "retention_by_reward",
    )
    assert [m[k] for k in tables] == [{}, {}, {}, {}]


async def test_the_cancelled_tail_counts_at_the_length_it_reached():
    # 4 short trials finish; 2 long ones have sampled 6 turns of 50 tokens when the batch fills (T1 §7.4)
    async def run_one(task, record):
        record.episode = Episode()
        n = 1 if task.category == "short" else 6
        record.episode.turns.extend(_turn(50) for _ in range(n))
        # the long ones are still running when the batch fills: cancelled as the straggler tail
        await asyncio.sleep(0.01 if task.category == "short" else 30)
        record.status = "finished"
        record.reward = _reward(0.25)
        return record

    tasks = [FakeTask(f"s{i}", "short") for i in range(4)] + [FakeTask(f"l{i}", "long") for i in range(2)]
    config = SchedulerConfig(
        launched=6, admitted=4, concurrency=6, creation_rate_per_s=1000, creation_quota_per_min=60000
    )
    batch = await collect_batch(Listed(tasks), run_one, config)
    m = batch.metrics()
    assert m["retention_by_turns"] == {
        "1": {"launched": 4, **ZERO, "kept": 4, "retention": 1.0},
        "4-7": {"launched": 2, **ZERO, "cancelled": 2, "retention": 0.0},
    }
    assert m["retention_by_tokens"] == {
        "32-63": {"launched": 4, **ZERO, "kept": 4, "retention": 1.0},
        "256-511": {"launched": 2, **ZERO, "cancelled": 2, "retention": 0.0},
    }
    assert m["retention_by_reward"]["unscored"]["cancelled"] == 2


async def test_wall_time_and_pacing_read_the_given_clock():
    # a clock that never moves: the token buckets never refill and the batch's wall time is 0 on it
    async def run_one(task, record):
        await asyncio.sleep(0.01)
        record.status = "finished"
        return record

    config = SchedulerConfig(
        launched=3, admitted=3, concurrency=3, creation_rate_per_s=3, creation_quota_per_min=60
    )
    tasks = [FakeTask(f"t{i}", "x") for i in range(3)]
    batch = await collect_batch(Listed(tasks), run_one, config, clock=lambda: 100.0)
    assert batch.wall_s == 0.0 and len(batch.admitted) == 3
