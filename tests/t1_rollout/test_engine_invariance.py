"""Batch invariance of the embedded engine: a request's ids and log-probs are bit-identical whatever it is
batched with, and equal to one-at-a-time decoding, for the same seeds."""

import asyncio

import numpy as np
import pytest
import torch

from t1_policy import build_model
from t1_rollout.engine import SamplingParams
from t1_rollout.engine.embedded import EmbeddedEngine


@pytest.fixture(autouse=True)
def one_thread():
    """The invariance holds for one torch thread, the engine's default (`EmbeddedEngine` sets it)."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def random_requests(seed: int, n: int = 16) -> list[tuple[list[int], SamplingParams]]:
    """``n`` prompts of 1 to 40 random ids, each with its own seed and budget (4 to 8 new tokens)."""
    rng = np.random.default_rng(seed)
    return [
        (
            rng.integers(0, 248_000, int(rng.integers(1, 41))).tolist(),
            SamplingParams(
                temperature=1.0, max_new_tokens=int(rng.integers(4, 9)), seed=int(rng.integers(1 << 30))
            ),
        )
        for _ in range(n)
    ]


def serve(model_spec, requests, max_batch_size: int, *, together: bool, batch_invariant: bool = True):
    eng = EmbeddedEngine(
        build_model(model_spec, seed=0),
        seed=0,
        max_batch_size=max_batch_size,
        batch_invariant=batch_invariant,
    )

    async def run():
        if together:
            return await asyncio.gather(*(eng.generate(p, s) for p, s in requests))
        return [await eng.generate(p, s) for p, s in requests]

    try:
        return asyncio.run(run()), eng._loop.peak_batch
    finally:
        eng.close()


@pytest.mark.parametrize("seed", [0, 1])
def test_ids_and_logprobs_bit_identical_batched_at_1_3_16_and_one_at_a_time(tiny_model_spec, seed):
    requests = random_requests(seed)
    alone, _ = serve(tiny_model_spec, requests, 1, together=False)
    for size in (1, 3, 16):
        batched, peak = serve(tiny_model_spec, requests, size, together=True)
        assert peak == size  # the batch did fill up
        for a, b in zip(alone, batched, strict=True):
            assert a.output_ids == b.output_ids
            assert torch.equal(torch.tensor(a.output_logprobs), torch.tensor(b.output_logprobs)), size
            np.testing.assert_array_equal(a.routed_experts, b.routed_experts)


def test_torch_kernels_alone_are_not_batch_invariant(tiny_model_spec):
    """What the mode is for: without it, batching moves some log-prob (it did by up to ~1e-6)."""
    requests = random_requests(0)
    alone, _ = serve(tiny_model_spec, requests, 1, together=False, batch_invariant=False)
    batched, _ = serve(tiny_model_spec, requests, 16, together=True, batch_invariant=False)
    moved = [
        a.output_ids != b.output_ids or a.output_logprobs != b.output_logprobs
        for a, b in zip(alone, batched, strict=True)
    ]
    if not any(moved):
        pytest.skip("torch's kernels here are already batch-invariant on these requests")
