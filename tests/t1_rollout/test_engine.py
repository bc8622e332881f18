import asyncio
import time

import numpy as np
import pytest
import torch

from t1_policy import build_model, token_logprobs
from t1_r3 import check_routing, replay_routing
from t1_rollout.engine import Engine, EngineStateError, SamplingParams
from t1_rollout.engine.embedded import EmbeddedEngine

IM_END, ENDOFTEXT = 248046, 248044
PROMPT = [151, 9707, 11, 1879, 0, 42, 248045, 77091, 198]


@pytest.fixture(scope="module")
def engine(tiny_model_spec):
    return EmbeddedEngine(build_model(tiny_model_spec, seed=0), seed=0)


@pytest.fixture
def fresh(tiny_model_spec):
    """A new engine on the seed-0 tiny model, with `EmbeddedEngine` keyword arguments."""

    def make(**kw):
        return EmbeddedEngine(build_model(tiny_model_spec, seed=0), **kw)

    return make


async def test_rows_cover_prompt_and_every_sampled_token_but_the_last(engine):
    assert isinstance(engine, Engine)
    gen = await engine.generate(PROMPT, SamplingParams(max_new_tokens=6, seed=1))
    assert gen.completion_tokens == len(gen.output_ids) == len(gen.output_logprobs) == 6
    assert gen.finish_reason == "length" and gen.prompt_tokens == len(PROMPT)
    assert gen.routed_experts.dtype == np.uint8  # compact: one byte per expert id (E = 8)
    assert gen.routed_experts.shape == (len(PROMPT) + 6 - 1, 4, 2)
    check_routing(gen.routed_experts, num_tokens=len(PROMPT) + 6, num_layers=4, top_k=2, num_experts=8)


async def test_same_seed_same_tokens_other_seed_other_tokens(engine):
    p = SamplingParams(max_new_tokens=8, seed=5)
    a, b = await engine.generate(PROMPT, p), await engine.generate(PROMPT, p)
    c = await engine.generate(PROMPT, SamplingParams(max_new_tokens=8, seed=6))
    assert a.output_ids == b.output_ids and a.output_logprobs == b.output_logprobs
    assert a.output_ids != c.output_ids


async def test_logprobs_match_teacher_forced_forward_with_replayed_routing(engine):
    gen = await engine.generate(PROMPT, SamplingParams(temperature=0.8, max_new_tokens=12, seed=3))
    tokens = torch.tensor([PROMPT + gen.output_ids])
    with torch.no_grad(), replay_routing(engine.model, gen.routed_experts):
        logits = engine.model(tokens).logits[0]
    trainer = token_logprobs(
        logits[len(PROMPT) - 1 : -1], torch.tensor(gen.output_ids), 0.8, vocab_limit=engine.vocab_limit
    )
    np.testing.assert_allclose(trainer.numpy(), np.array(gen.output_logprobs), atol=1e-5, rtol=0)


async def test_stops_on_im_end_and_keeps_it(fresh):
    eng = fresh()
    first = (await eng.generate(PROMPT, SamplingParams(temperature=0, max_new_tokens=1))).output_ids[0]
    with torch.no_grad():  # make <|im_end|> the greedy choice: twice the winning row's logit
        eng.model.lm_head.weight[IM_END] = 2 * eng.model.lm_head.weight[first]
    gen = await eng.generate(
        PROMPT, SamplingParams(temperature=0, max_new_tokens=50, stop_token_ids=(IM_END, ENDOFTEXT))
    )
    assert gen.output_ids == [IM_END] and gen.finish_reason == "stop"
    assert gen.routed_experts.shape[0] == len(PROMPT)  # the stop token itself was never forwarded


async def test_padded_vocabulary_ids_are_never_sampled(fresh):
    eng = fresh()
    with torch.no_grad():  # give every padded row (>= 248077) a far larger logit than any real token
        eng.model.lm_head.weight[248077:] = 50 * eng.model.lm_head.weight[:243].repeat(1, 1)
    gen = await eng.generate(PROMPT, SamplingParams(max_new_tokens=20, seed=0))
    assert max(gen.output_ids) < 248077


async def test_top_k_one_is_greedy(engine):
    greedy = await engine.generate(PROMPT, SamplingParams(temperature=0, max_new_tokens=5))
    topk1 = await engine.generate(PROMPT, SamplingParams(top_k=1, max_new_tokens=5, seed=9))
    assert topk1.output_ids == greedy.output_ids
    # The distribution drawn from is a point mass on the argmax: log 1, not the untruncated softmax's.
    assert topk1.output_logprobs == greedy.output_logprobs == [0.0] * 5


async def test_truncated_logprobs_match_the_renormalised_teacher_forced_distribution(engine):
    sampling = SamplingParams(temperature=0.8, top_k=20, top_p=0.9, max_new_tokens=8, seed=4)
    gen = await engine.generate(PROMPT, sampling)
    with torch.no_grad(), replay_routing(engine.model, gen.routed_experts):
        logits = engine.model(torch.tensor([PROMPT + gen.output_ids])).logits[0]
    for pos, (tok, lp) in enumerate(zip(gen.output_ids, gen.output_logprobs, strict=True)):
        z = logits[len(PROMPT) - 1 + pos, : engine.vocab_limit].double() / 0.8
        p = torch.softmax(z, -1)
        top = torch.topk(p, 20)
        q = top.values / top.values.sum()  # top-k renormalised, descending
        kept = int((torch.cumsum(q, 0) - q < 0.9).sum())
        ids_kept = top.indices[:kept].tolist()
        assert tok in ids_kept
        expected = float(z[tok] - torch.logsumexp(z[ids_kept], 0))
        assert abs(lp - expected) < 1e-5


async def test_next_turn_reuses_prefix_and_matches_fresh_prefill(fresh):
    cached, uncached = fresh(), fresh(prefix_cache_size=0)
    p = SamplingParams(max_new_tokens=5, seed=2)
    t1c, t1u = await cached.generate(PROMPT, p), await uncached.generate(PROMPT, p)
    assert t1c.output_ids == t1u.output_ids
    prompt2 = PROMPT + t1c.output_ids + [198, 248045, 872, 198, 13, 14]
    start = len(PROMPT) + len(t1c.output_ids) - 1
    assert len(cached._prefixes) == 1
    t2c = await cached.generate(prompt2, p, routed_experts_start_len=start)
    assert cached.stats()["cached_tokens"] == start  # turn 2 prefilled only what turn 1 had not forwarded
    assert uncached.stats()["cached_tokens"] == 0
    t2u = await uncached.generate(prompt2, p)
    assert t2c.output_ids == t2u.output_ids
    np.testing.assert_allclose(t2c.output_logprobs, t2u.output_logprobs, atol=1e-5)
    assert t2c.routed_experts_start_len == start
    np.testing.assert_array_equal(t2c.routed_experts, t2u.routed_experts[start:])
    # turn-1 rows + turn-2 patch = the whole sequence's rows (SGLang routed_experts_start_len semantics)
    np.testing.assert_array_equal(
        np.concatenate([t1c.routed_experts, t2c.routed_experts]), t2u.routed_experts
    )


async def test_update_weights_advances_version_and_needs_pause(fresh, tiny_model_spec):
    eng = fresh()
    donor = build_model(tiny_model_spec, seed=1).state_dict()
    with pytest.raises(EngineStateError, match="paused"):
        eng.update_weights(donor, weight_version=1)
    before = await eng.generate(PROMPT, SamplingParams(max_new_tokens=4, seed=0))
    assert before.weight_version == 0
    eng.pause()
    eng.update_weights(donor, weight_version=1)
    with pytest.raises(ValueError, match="does not advance"):
        eng.update_weights(donor, weight_version=1)
    eng.resume()
    after = await eng.generate(PROMPT, SamplingParams(max_new_tokens=4, seed=0))
    assert after.weight_version == eng.weight_version == 1
    assert torch.equal(eng.model.state_dict()["lm_head.weight"], donor["lm_head.weight"])
    assert after.output_logprobs != before.output_logprobs
    assert eng._prefixes.keys() == {tuple(PROMPT + after.output_ids[:-1])}  # old-version states flushed


async def test_update_weights_refuses_unknown_names_and_shapes(fresh):
    eng = fresh()
    eng.pause()
    with pytest.raises(ValueError, match="unknown tensor names"):
        eng.update_weights({"nope": torch.zeros(1)}, weight_version=1)
    with pytest.raises(ValueError, match="shape mismatch"):
        eng.update_weights({"lm_head.weight": torch.zeros(2, 2)}, weight_version=1)
    assert eng.weight_version == 0


async def test_pause_holds_new_requests_until_resume(engine):
    engine.pause()
    task = asyncio.create_task(engine.generate(PROMPT, SamplingParams(max_new_tokens=2, seed=0)))
    await asyncio.sleep(0.3)
    assert not task.done()
    engine.resume()
    assert (await task).completion_tokens == 2


async def test_many_trials_share_one_engine(engine):
    gens = await asyncio.gather(
        *(engine.generate(PROMPT, SamplingParams(max_new_tokens=3, seed=s)) for s in range(4))
    )
    assert [g.completion_tokens for g in gens] == [3, 3, 3, 3]
    assert (
        gens[0].output_ids
        == (await engine.generate(PROMPT, SamplingParams(max_new_tokens=3, seed=0))).output_ids
    )


async def test_cancelled_request_stops_at_its_next_token(engine):
    # A cancelled straggler (T1 §7, tail cancellation) must free the engine, not run 5000 more tokens.
    long = asyncio.create_task(engine.generate(PROMPT, SamplingParams(max_new_tokens=5000, seed=0)))
    await asyncio.sleep(0.3)
    long.cancel()
    with pytest.raises(asyncio.CancelledError):
        await long
    t0 = time.monotonic()
    assert (await engine.generate(PROMPT, SamplingParams(max_new_tokens=1, seed=0))).completion_tokens == 1
    assert time.monotonic() - t0 < 10.0


async def test_bad_requests_are_refused_before_any_work(engine):
    with pytest.raises(ValueError, match="empty"):
        await engine.generate([], SamplingParams())
    with pytest.raises(ValueError, match="outside the vocabulary"):
        await engine.generate([248320], SamplingParams())
    with pytest.raises(ValueError, match="routed_experts_start_len"):
        await engine.generate(PROMPT, SamplingParams(), routed_experts_start_len=len(PROMPT) + 1)
    with pytest.raises(ValueError, match="max_new_tokens"):
        SamplingParams(max_new_tokens=0)


def test_model_without_full_attention_layer_is_refused_clearly(tiny_model_spec):
    spec = tiny_model_spec.model_copy(update={"num_layers": 2, "vocab_size": 512})  # 2 < interval 4
    with pytest.raises(ValueError, match="at least one full-attention layer"):
        EmbeddedEngine(build_model(spec, seed=0), seed=0)


async def test_two_turn_trajectory_replays_to_the_sampler_logprobs(fresh):
    # The stitched stream (turn-1 rows + turn-2 patch) replayed over prompt2 + output2 gives back both turns'
    # rollout log-probs: the trainer's view equals the sampler's (T1 §4.2, §4.4).
    eng = fresh()
    p = SamplingParams(temperature=1.0, max_new_tokens=6, seed=4)
    t1 = await eng.generate(PROMPT, p)
    prompt2 = PROMPT + t1.output_ids + [198, 248045, 872, 198, 13]
    t2 = await eng.generate(prompt2, p, routed_experts_start_len=len(PROMPT) + len(t1.output_ids) - 1)
    tokens = prompt2 + t2.output_ids
    routing = np.concatenate([t1.routed_experts, t2.routed_experts])
    with torch.no_grad(), replay_routing(eng.model, routing):
        logits = eng.model(torch.tensor([tokens])).logits[0]
    logp = token_logprobs(logits[:-1], torch.tensor(tokens[1:]), 1.0, vocab_limit=eng.vocab_limit)
    turn1 = logp[len(PROMPT) - 1 : len(PROMPT) - 1 + len(t1.output_ids)]
    turn2 = logp[len(prompt2) - 1 :]
    np.testing.assert_allclose(turn1.numpy(), t1.output_logprobs, atol=1e-5, rtol=0)
    np.testing.assert_allclose(turn2.numpy(), t2.output_logprobs, atol=1e-5, rtol=0)


async def test_request_cancelled_during_pause_never_runs(fresh):
    eng = fresh()
    eng.pause()
    task = asyncio.create_task(eng.generate(PROMPT, SamplingParams(max_new_tokens=3, seed=0)))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    eng.resume()
    await asyncio.sleep(0.2)
    assert not eng._prefixes  # nothing was prefilled for the cancelled request
    assert (await eng.generate(PROMPT, SamplingParams(max_new_tokens=2, seed=0))).completion_tokens == 2
