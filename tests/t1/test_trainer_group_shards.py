"""A Ray run's trainer ranks receive only their shard: the driver plans the step (`t1.run.ray.trainer_group`).

The rank actors are stand-ins that record what each call carries (its arguments, pickled as Ray pickles
them); no Ray cluster is started. The batch's samples carry R3 routing records of a paper-like router
geometry (48 MoE layers, top-8 of 128 experts), so the records are most of the batch's bytes.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from t1.run.ray.trainer_group import GroupTrain, Refused, TrainerGroup
from t1_spec import load_recipe
from t1_tito import Sample
from t1_trainer.distributed import shard_by_tokens
from t1_trainer.errors import StalenessError
from t1_trainer.shard_plan import RouterGeometry

TINY_RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "tiny-cpu.yaml"
GEOMETRY = RouterGeometry(num_layers=48, top_k=8, num_experts=128)


class _Method:
    def __init__(self, calls: list, name: str) -> None:
        self.calls, self.name = calls, name

    def remote(self, *args):
        self.calls.append((self.name, args, len(pickle.dumps(args))))
        return object()


class _Rank:
    """A rank actor's handle that records its calls: ``(method, args, pickled bytes)``."""

    def __init__(self) -> None:
        self.calls: list = []

    def __getattr__(self, name: str) -> _Method:
        return _Method(self.calls, name)


def _sample(i: int, n_tokens: int, version: int = 0) -> Sample:
    rng = np.random.default_rng(i)
    mask = np.zeros(n_tokens, dtype=np.int8)
    mask[n_tokens // 2 :] = 1
    experts = np.argsort(rng.random((n_tokens - 1, GEOMETRY.num_layers, GEOMETRY.num_experts)), axis=-1)
    sample = Sample(
        token_ids=rng.integers(0, 1000, n_tokens).astype(np.int32),
        loss_mask=mask,
        rollout_logprobs=np.where(mask == 1, -1.0, 0.0).astype(np.float32),
        routing=experts[..., : GEOMETRY.top_k].astype(np.uint8),
        reward=1.0,
        reward_index=n_tokens - 1,
        task_id=f"t{i}",
        family="scripting",
        trial_id=f"trial-{i}",
        chunk_index=0,
        policy_version=version,
    )
    sample.validate()
    return sample


@pytest.fixture(scope="module")
def batch() -> list[Sample]:
    return [_sample(i, n) for i, n in enumerate([200, 120, 310, 90, 260, 150, 180, 240])]


def _group(n: int) -> tuple[TrainerGroup, list[_Rank]]:
    ranks = [_Rank() for _ in range(n)]
    group = TrainerGroup(load_recipe(TINY_RECIPE), ranks)
    group.pids, group.version, group.geometry = list(range(100, 100 + n)), 0, GEOMETRY
    return group, ranks


def test_each_rank_receives_only_its_shard_and_the_plan(batch):
    group, ranks = _group(2)
    pending = group.ppo_step(batch, staleness=0, continuation_lag=0, max_staleness=1)
    assert isinstance(pending, GroupTrain)
    want = shard_by_tokens([len(s.token_ids) for s in batch], 2)
    whole = len(pickle.dumps((list(batch), 0, 0, 1)))  # what each rank received when every rank got the batch
    sent = []
    for k, rank in enumerate(ranks):
        [(method, args, size)] = rank.calls
        shard, plan = args[0], args[1]
        assert method == "ppo_step" and plan.shards == want and plan.batch_size == len(batch)
        assert [s.trial_id for s in shard] == [batch[i].trial_id for i in want[k]]
        sent.append(size)
    # the shards split the batch's bytes: each rank gets about half of what it got before (the plan is small)
    assert sum(sent) < 1.01 * whole and max(sent) < 0.6 * whole
    print(f"bytes per rank: whole batch {whole}, shards {sent}")


def test_the_critic_warmup_sends_shards_too(batch):
    group, ranks = _group(3)
    group.critic_warmup_step(batch)
    want = shard_by_tokens([len(s.token_ids) for s in batch], 3)
    for k, rank in enumerate(ranks):
        [(method, (shard, plan), _)] = rank.calls
        assert method == "critic_warmup_step" and plan.shards == want
        assert [s.trial_id for s in shard] == [batch[i].trial_id for i in want[k]]


def test_a_refusal_of_the_whole_batch_comes_from_the_driver_before_any_rank_is_called(batch):
    group, ranks = _group(2)
    group.version = 2  # the samples are of version 0: two versions behind a synchronous step
    pending = group.ppo_step(batch, staleness=0, continuation_lag=0, max_staleness=1)
    assert isinstance(pending, Refused) and all(not r.calls for r in ranks)
    with pytest.raises(StalenessError, match="max_staleness"):
        pending.result()
    group.version = 0
    few = group.ppo_step(batch[:1], staleness=0, continuation_lag=0, max_staleness=1)
    with pytest.raises(Exception, match="1 trainable samples for 2 data-parallel ranks"):
        few.result()
    assert all(not r.calls for r in ranks)


def test_an_aborted_record_is_planned_in_the_driver_and_not_sent(batch):
    group, ranks = _group(2)
    short = [
        *batch[:3],
        Sample(**{**batch[3].__dict__, "routing": np.asarray(batch[3].routing)[:-1]}),
        *batch[4:],
    ]
    group.ppo_step(short, staleness=0, continuation_lag=0, max_staleness=1)
    plans = [r.calls[0][1][1] for r in ranks]
    assert all(list(p.routing_errors) == [3] for p in plans)
    assert 3 not in [i for shard in plans[0].shards for i in shard]
    assert all(s.trial_id != "trial-3" for r in ranks for s in r.calls[0][1][0])


def test_one_rank_still_gets_the_whole_batch(batch):
    group, ranks = _group(1)
    group.ppo_step(batch, staleness=0, continuation_lag=0, max_staleness=1)
    [(method, args, _)] = ranks[0].calls
    assert method == "ppo_step" and len(args[0]) == len(batch) and args[1:] == (0, 0, 1)
