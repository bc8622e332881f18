"""A `Sample` through JSON and back (a checkpoint's rollout buffer): every stream bit for bit, or refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from t1_tito import Sample, StreamMisalignmentError


def _sample(routing_dtype=np.uint8) -> Sample:
    rng = np.random.default_rng(0)
    mask = np.array([0, 0, 0, 1, 1, 1, 0, 1, 1], dtype=np.int8)
    # float32 log-probs that no short decimal writes exactly
    logprobs = np.where(mask == 1, -rng.random(9, dtype=np.float32) * np.float32(7.3), 0).astype(np.float32)
    return Sample(
        token_ids=rng.integers(0, 150_000, 9).astype(np.int32),
        loss_mask=mask,
        rollout_logprobs=logprobs,
        routing=rng.integers(0, 8, (8, 2, 2)).astype(routing_dtype),
        reward=np.float64(0.1) + 0.2,  # 0.30000000000000004: a float JSON keeps exactly
        reward_index=8,
        task_id="task",
        family="scripting",
        trial_id="task__0123abcd",
        chunk_index=1,
        policy_version=np.int64(3),
        policy_versions_mixed=False,
    )


@pytest.mark.parametrize("routing_dtype", [np.uint8, np.uint16, np.int32])
def test_every_stream_comes_back_bit_for_bit(routing_dtype):
    sample = _sample(routing_dtype)
    text = json.dumps(sample.to_json())  # plain JSON: numpy scalars became numbers
    back = Sample.from_json(json.loads(text))
    for name in ("token_ids", "loss_mask", "rollout_logprobs", "routing"):
        a, b = getattr(sample, name), getattr(back, name)
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), name
    assert back.reward == 0.30000000000000004 and back.policy_version == 3
    assert (back.task_id, back.trial_id, back.chunk_index, back.reward_index) == (
        "task",
        "task__0123abcd",
        1,
        8,
    )
    back.routing[0, 0, 0] += 1  # a writable copy, not a view of the decoded bytes


def test_a_sample_without_routing_round_trips():
    sample = Sample(**{**vars(_sample()), "routing": None})
    assert Sample.from_json(json.loads(json.dumps(sample.to_json()))).routing is None


def test_a_broken_record_is_refused_naming_it():
    record = _sample().to_json()
    with pytest.raises(StreamMisalignmentError, match="buffer line 4: not a sample record"):
        Sample.from_json({k: v for k, v in record.items() if k != "loss_mask"}, "buffer line 4")
    with pytest.raises(StreamMisalignmentError, match="not a sample record"):
        Sample.from_json({**record, "extra": 1})
    cut = {**record["token_ids"], "base64": record["token_ids"]["base64"][:8]}
    with pytest.raises(StreamMisalignmentError, match="token_ids: not an array record"):
        Sample.from_json({**record, "token_ids": cut})
    # decodes, but breaks the four-stream invariant: the reward is not on the last loss position
    with pytest.raises(StreamMisalignmentError, match="reward_index 7"):
        Sample.from_json({**record, "reward_index": 7})
