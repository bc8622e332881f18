"""The batch-level part of a data-parallel step (`t1_trainer.shard_plan`), planned without the ranks.

The driver of a Ray run plans each step from the whole batch and no weights; its routing check must abort
the samples, with the messages, the backend's own check gives, and its refusals must be the ones every rank
raised when each rank planned.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from t1_spec import GRPOAdvantageSpec, PPOSpec
from t1_trainer.distributed import shard_by_tokens
from t1_trainer.errors import SampleError, StalenessError, TrainerConfigError
from t1_trainer.shard_plan import (
    RouterGeometry,
    geometry_routing_errors,
    plan_critic_warmup_step,
    plan_ppo_step,
    router_geometry,
)
from t1_trainer.torch_backend import TorchBackend

PPO = PPOSpec(batch_size=4)


@pytest.fixture(scope="module")
def backend(tiny_model_spec):
    return TorchBackend(model_spec=tiny_model_spec, ppo_spec=PPO, seed=0)


@pytest.fixture(scope="module")
def batch(backend, sample_with):
    turns = [[(6, 4), (4, 0)], [(5, 0)], [(8, 3), (3, 0)], [(9, 0)], [(4, 0)]]
    return [
        sample_with(backend.actor, prompt_len=16, turns=t, reward=0.5, seed=i, task_id=f"t{i}")
        for i, t in enumerate(turns)
    ]


def _broken(batch, num_experts: int) -> list:
    """The batch with four records the replay must refuse: missing, short, an expert id out of range, L."""
    rec = [np.asarray(s.routing) for s in batch]
    return [
        dataclasses.replace(batch[0], routing=None),
        dataclasses.replace(batch[1], routing=rec[1][:-2]),
        batch[2],
        dataclasses.replace(batch[3], routing=np.full_like(rec[3], num_experts)),
        dataclasses.replace(batch[4], routing=np.concatenate([rec[4], rec[4]], axis=1)),
    ]


def test_the_geometry_check_aborts_what_the_backend_aborts_with_its_messages(backend, batch):
    geometry = router_geometry(backend.actor)
    assert geometry.num_experts > 1 and geometry.top_k >= 1 and geometry.num_layers >= 1
    broken = _broken(batch, geometry.num_experts)
    want = backend.routing_errors(broken)
    assert sorted(want) == [0, 1, 3, 4]
    assert geometry_routing_errors(broken, geometry) == want
    assert geometry_routing_errors(batch, geometry) == {} == backend.routing_errors(batch)
    assert geometry_routing_errors(broken, None) == {}  # replay off: nothing is aborted


def test_the_plan_shards_the_kept_samples_by_tokens(backend, batch):
    geometry = router_geometry(backend.actor)
    broken = [dataclasses.replace(batch[1], routing=None) if i == 1 else s for i, s in enumerate(batch)]
    plan = plan_ppo_step(
        broken,
        PPO,
        2,
        policy_version=0,
        routing_errors=functools.partial(geometry_routing_errors, geometry=geometry),
    )
    kept = [0, 2, 3, 4]
    want = [[kept[j] for j in shard] for shard in shard_by_tokens([len(batch[i].token_ids) for i in kept], 2)]
    assert plan.shards == want and plan.batch_size == 5
    assert list(plan.routing_errors) == [1] and "routing record missing" in plan.routing_errors[1]
    assert plan.versions["trainer/policy_version"] == 0
    assert plan_critic_warmup_step(batch, 3).shards == shard_by_tokens([len(s.token_ids) for s in batch], 3)


def test_the_plan_refuses_what_every_rank_refused(backend, batch):
    geometry = RouterGeometry(1, 1, 1)  # every record is refused: nothing is left to train
    with pytest.raises(TrainerConfigError, match="0 trainable samples for 2 data-parallel ranks"):
        plan_ppo_step(
            batch,
            PPO,
            2,
            policy_version=0,
            routing_errors=functools.partial(geometry_routing_errors, geometry=geometry),
        )
    with pytest.raises(StalenessError):
        plan_ppo_step(batch, PPO, 2, policy_version=3, routing_errors=backend.routing_errors)
    with pytest.raises(TrainerConfigError, match="over ranks is not built"):
        grpo = PPO.model_copy(update={"advantage": GRPOAdvantageSpec(group_size=4)})
        plan_ppo_step(batch, grpo, 2, policy_version=0, routing_errors=backend.routing_errors)
    bad = dataclasses.replace(batch[0], loss_mask=np.asarray(batch[0].loss_mask)[:-1])
    with pytest.raises(SampleError):
        plan_critic_warmup_step([bad, *batch[1:]], 2)
    with pytest.raises(TrainerConfigError, match="5 trainable samples for 6 data-parallel ranks"):
        plan_critic_warmup_step(batch, 6)
