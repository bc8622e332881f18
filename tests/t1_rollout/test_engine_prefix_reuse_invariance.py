"""A prefix-cache hit against a fresh prefill of the same prompt: the engine's bit-for-bit claims hold for
one batch composition against another only while both see the same hits (the cache is LRU, flushed on a
weight update, and what it holds depends on which answers finished first)."""

import asyncio

import numpy as np
import pytest
import torch

from t1_policy import build_model
from t1_rollout.engine import SamplingParams
from t1_rollout.engine.embedded import EmbeddedEngine


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def serve(model_spec, requests):
    eng = EmbeddedEngine(build_model(model_spec, seed=0), seed=0, max_batch_size=1)

    async def run():
        return [await eng.generate(p, s) for p, s in requests]

    try:
        return asyncio.run(run())
    finally:
        eng.close()


@pytest.mark.xfail(
    strict=True,
    reason="not built: prefilling only a prompt's new tokens after a cached prefix (GDN chunked recurrence "
    "from a cached state, attention over a shorter query block) rounds differently from prefilling the "
    "whole prompt; measured up to 9.5e-7 in a log-prob on the tiny model, ids equal",
)
def test_a_prefix_cache_hit_gives_the_fresh_prefills_logprobs(tiny_model_spec):
    rng = np.random.default_rng(3)
    first = rng.integers(0, 248_000, 73).tolist()
    first_params = SamplingParams(temperature=1.0, max_new_tokens=6, seed=1)
    (answer,) = serve(tiny_model_spec, [(first, first_params)])
    # the next turn of the same trial: the first prompt, its answer and new tokens (a cache hit)
    turn = first + answer.output_ids + rng.integers(0, 248_000, 20).tolist()
    turn_params = SamplingParams(temperature=1.0, max_new_tokens=8, seed=2)
    (fresh,) = serve(tiny_model_spec, [(turn, turn_params)])
    _, hit = serve(tiny_model_spec, [(first, first_params), (turn, turn_params)])
    assert fresh.output_ids == hit.output_ids
    assert torch.equal(torch.tensor(fresh.output_logprobs), torch.tensor(hit.output_logprobs))
