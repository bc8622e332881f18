"""Continuous batching in the embedded engine: same answers as one-at-a-time decoding, same quiescence."""

import asyncio

import numpy as np
import pytest

from t1_policy import build_model
from t1_rollout.engine import SamplingParams
from t1_rollout.engine.batching import check_batchable
from t1_rollout.engine.embedded import EmbeddedEngine
from t1_spec import EmbeddedEngineSpec

# Prompts of different lengths (1 to 23 tokens), so the batched cache holds left padding of every width.
PROMPTS = [
    [151, 9707, 11, 1879, 0, 42, 248045, 77091, 198],
    [7],
    [300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 310, 311, 312, 313, 314, 315, 316, 317, 318, 319, 320],
    [248045, 872, 198, 13],
    [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27],
    [1000, 2000, 3000],
]
BUDGETS = [9, 14, 5, 12, 7, 11]  # different stop points by length
LOGPROB_ATOL = 0.0  # the forwards are batch-invariant (t1_rollout.engine.invariant): bit-identical


@pytest.fixture
def make(tiny_model_spec):
    """New engines on the seed-0 tiny model (same spec, same seed: bit-identical weights), closed after."""
    engines = []

    def build(**kw):
        eng = EmbeddedEngine(build_model(tiny_model_spec, seed=0), seed=0, **kw)
        engines.append(eng)
        return eng

    yield build
    for eng in engines:
        eng.close()


def params(i, stop=()):
    return SamplingParams(temperature=1.0, max_new_tokens=BUDGETS[i], stop_token_ids=stop, seed=100 + i)


async def one_at_a_time(eng, requests):
    return [await eng.generate(p, s) for p, s in requests]


def assert_same(batched, serial):
    worst = 0.0
    for b, s in zip(batched, serial, strict=True):
        assert b.output_ids == s.output_ids
        assert b.finish_reason == s.finish_reason
        np.testing.assert_array_equal(b.routed_experts, s.routed_experts)
        diff = np.abs(np.array(b.output_logprobs) - np.array(s.output_logprobs))
        worst = max(worst, float(diff.max()))
        assert b.weight_version == s.weight_version
    assert worst <= LOGPROB_ATOL
    return worst


async def test_batched_decoding_matches_one_at_a_time(make):
    serial_eng = make()
    requests = [(p, params(i)) for i, p in enumerate(PROMPTS)]
    serial = await one_at_a_time(serial_eng, requests)
    # Stop ids taken from the serial answers: request i stops at its first occurrence of its 3rd token.
    stops = [(s.output_ids[2],) if i % 2 == 0 else () for i, s in enumerate(serial)]
    requests = [(p, params(i, stops[i])) for i, p in enumerate(PROMPTS)]
    serial = await one_at_a_time(make(), requests)
    assert any(g.finish_reason == "stop" for g in serial) and any(g.finish_reason == "length" for g in serial)

    eng = make(max_batch_size=8)
    batched = await asyncio.gather(*(eng.generate(p, s) for p, s in requests))
    worst = assert_same(batched, serial)
    stats = eng.stats()
    # One forward served many sequences: fewer decode steps than decoded tokens.
    assert eng._loop.peak_batch == len(PROMPTS)
    assert stats["decode_steps"] < stats["completion_tokens"] - len(PROMPTS)
    print(f"max |logprob batched - one at a time| = {worst:.3g}")


async def test_requests_join_between_steps_and_answers_do_not_change(make):
    requests = [(p, params(i)) for i, p in enumerate(PROMPTS)]
    serial = await one_at_a_time(make(), requests)
    eng = make(max_batch_size=4)
    tasks = []
    for p, s in requests:  # staggered arrivals: later requests join a batch already decoding
        tasks.append(asyncio.create_task(eng.generate(p, s)))
        await asyncio.sleep(0.05)
    batched = await asyncio.gather(*tasks)
    assert_same(batched, serial)
    assert eng._loop.peak_batch <= 4  # the bound of max_batch_size holds


async def test_next_turn_reuses_prefix_inside_a_batch(make):
    serial_eng, eng = make(), make(max_batch_size=4)
    first = [(p, params(i)) for i, p in enumerate(PROMPTS[:3])]
    s1, b1 = await one_at_a_time(serial_eng, first), await asyncio.gather(*(eng.generate(*r) for r in first))
    second = [
        (p + g.output_ids + [198, 248045, 872, 198], params(i))
        for i, (p, g) in enumerate(zip(PROMPTS[:3], s1, strict=True))
    ]
    s2, b2 = (
        await one_at_a_time(serial_eng, second),
        await asyncio.gather(*(eng.generate(*r) for r in second)),
    )
    assert_same(b1, s1)
    assert_same(b2, s2)
    reused = sum(len(p) + len(g.output_ids) - 1 for (p, _), g in zip(first, b1, strict=True))
    assert eng.stats()["cached_tokens"] == serial_eng.stats()["cached_tokens"] == reused


async def test_cancelling_one_sequence_leaves_the_others_unchanged(make):
    requests = [(p, params(i)) for i, p in enumerate(PROMPTS[:4])]
    serial = await one_at_a_time(make(), requests)
    eng = make(max_batch_size=8)
    long = asyncio.create_task(eng.generate(PROMPTS[4], SamplingParams(max_new_tokens=5000, seed=0)))
    others = [asyncio.create_task(eng.generate(p, s)) for p, s in requests]
    await asyncio.sleep(0.5)
    long.cancel()
    with pytest.raises(asyncio.CancelledError):
        await long
    assert_same(await asyncio.gather(*others), serial)
    assert tuple(PROMPTS[4]) not in {k[: len(PROMPTS[4])] for k in eng._prefixes}  # aborted: not kept


async def test_pause_drains_the_whole_batch_and_no_answer_spans_two_versions(make, tiny_model_spec):
    eng = make(max_batch_size=8)
    running = [asyncio.create_task(eng.generate(p, params(i))) for i, p in enumerate(PROMPTS)]
    await asyncio.sleep(0.3)
    await asyncio.to_thread(eng.pause)
    # pause returned only after every sequence in flight finished: nothing can decode while paused
    _, pending = await asyncio.wait(running, timeout=2.0)
    assert not pending
    held = asyncio.create_task(eng.generate(PROMPTS[0], params(0)))
    await asyncio.sleep(0.3)
    assert not held.done()
    eng.update_weights(build_model(tiny_model_spec, seed=1).state_dict(), weight_version=1)
    eng.resume()
    assert [t.result().weight_version for t in running] == [0] * len(PROMPTS)
    after = await held
    assert after.weight_version == 1
    assert after.output_logprobs != running[0].result().output_logprobs


async def test_single_request_is_bit_identical_with_and_without_batching(make):
    a = await make().generate(PROMPTS[0], params(0))
    b = await make(max_batch_size=16).generate(PROMPTS[0], params(0))
    assert a.output_ids == b.output_ids and a.output_logprobs == b.output_logprobs
    np.testing.assert_array_equal(a.routed_experts, b.routed_experts)


def test_spec_bound_reaches_the_engine_and_refuses_zero(tiny_model_spec):
    with pytest.raises(ValueError, match="max_batch_size"):
        EmbeddedEngineSpec(max_batch_size=0)
    eng = EmbeddedEngine.from_spec(
        EmbeddedEngineSpec(max_batch_size=3), model=build_model(tiny_model_spec, seed=0), seed=0
    )
    try:
        assert eng._loop.max_batch_size == 3
    finally:
        eng.close()
    assert EmbeddedEngineSpec().max_batch_size == 1  # default: one request at a time


def test_closing_while_paused_fails_the_held_requests(make):
    eng = make(max_batch_size=2)
    eng.pause()

    async def held():
        task = asyncio.create_task(eng.generate(PROMPTS[1], params(1)))
        await asyncio.sleep(0.1)
        await asyncio.to_thread(eng.close)
        return await task

    with pytest.raises(Exception, match="closed while paused"):
        asyncio.run(held())


def test_cache_layers_that_cannot_be_stacked_are_refused_by_name():
    class DynamicSlidingWindowLayer:  # named as transformers' sliding-window layer
        pass

    class Cache:
        layers = [DynamicSlidingWindowLayer()]

    with pytest.raises(ValueError, match=r"DynamicSlidingWindowLayer.*max_batch_size: 1"):
        check_batchable(Cache())
