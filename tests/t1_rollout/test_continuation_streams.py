"""A trajectory parked mid-turn and continued under new weights keeps its streams aligned (T1 §4.1, §10).

The real embedded engine on the tiny Qwen3.5-MoE, the real harness and the real TITO stitcher: the episode is
asked to park while its second generation is in flight, the engine publishes new weights (version 1), and the
episode is resumed. The partial turn is discarded and sampled again in full under version 1; the first turn's
ids, log-probs, routing rows and version are bit-identical before and after; the stitched sample mixes
versions and still satisfies the four-stream invariant and the routing contract (`t1_r3.check_routing`).
"""

from __future__ import annotations

import asyncio

import numpy as np
import torch

from t1_policy import build_model
from t1_r3 import check_routing
from t1_rollout.engine.base import SamplingParams
from t1_rollout.engine.embedded import EmbeddedEngine
from t1_rollout.harness import Episode, HarnessConfig, run_episode
from t1_rollout.parking import Parking
from t1_tito import ChatTemplate, TitoSession, load_tokenizer


class AskOnCall:
    """The engine, asking ``parking`` to park right after it submitted its ``call``-th request."""

    def __init__(self, engine: EmbeddedEngine, parking: Parking, call: int) -> None:
        self.engine, self.parking, self.call, self.calls = engine, parking, call, 0

    @property
    def weight_version(self) -> int:
        return self.engine.weight_version

    async def generate(self, input_ids, sampling, **kw):
        self.calls += 1
        if self.calls == self.call:
            self.parking.ask()  # the generation below is in flight when the harness sees the request
        return await self.engine.generate(input_ids, sampling, **kw)


class Shell:
    async def send(self, keystrokes, *, duration_s, max_wait_s):
        return "$ "


def _turn_state(turn):
    return (
        np.asarray(turn.prompt_ids).copy(),
        np.asarray(turn.output_ids).copy(),
        np.asarray(turn.output_logprobs).copy(),
        turn.routed_experts.copy(),
        turn.routed_experts_start_len,
        turn.policy_version,
    )


async def test_streams_and_routing_hold_across_a_resumption_under_new_weights(tiny_model_spec):
    model = build_model(tiny_model_spec, seed=0)
    engine = EmbeddedEngine(model, seed=0)
    tito = TitoSession(load_tokenizer("qwen3.5"), ChatTemplate())
    parking, episode = Parking(), Episode()
    run = asyncio.ensure_future(
        run_episode(
            instruction="Create /app/out.txt containing hello.",
            shell=Shell(),
            engine=AskOnCall(engine, parking, call=2),
            tito=tito,
            sampling=SamplingParams(seed=3),
            config=HarnessConfig(max_turns=4, agent_deadline_s=600, max_new_tokens=24, context_tokens=4096),
            episode=episode,
            parking=parking,
        )
    )
    try:
        await asyncio.wait_for(parking.wait_parked(), timeout=120)
        # the second generation was aborted: nothing of it is recorded
        assert len(episode.turns) == 1 and episode.resampled_turns == 1
        first = _turn_state(episode.turns[0])
        rows_first = first[3].shape[0]  # rows the chunk covered when the trial parked

        # the step's training publishes new weights: every router is moved, so routing may change
        state = model.state_dict()
        gen = torch.Generator().manual_seed(1)
        donor = {
            k: v + 0.5 * torch.randn(v.shape, generator=gen, dtype=v.dtype)
            for k, v in state.items()
            if k.endswith("mlp.gate.weight")
        }
        assert donor, "the tiny model has router weights named *.mlp.gate.weight"
        engine.pause()
        engine.update_weights(donor, weight_version=1)
        engine.resume()
        parking.resume()
        await asyncio.wait_for(run, timeout=300)
        # version 1 routes the first turn's positions otherwise: a record overwritten by the resumed
        # prefill would differ from the one the first turn was sampled with
        again = await engine.generate(
            np.concatenate([first[0], first[1]]).tolist(), SamplingParams(max_new_tokens=1, seed=0)
        )
        assert not np.array_equal(again.routed_experts[:rows_first], first[3])
    finally:
        run.cancel()
        engine.close()

    assert [t.policy_version for t in episode.turns] == [0, 1, 1, 1]
    # the first turn is bit-identical before and after the resumption: ids, log-probs, routing, version
    after = _turn_state(episode.turns[0])
    for a, b in zip(first, after, strict=True):
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype and np.array_equal(a, b)
        else:
            assert a == b
    # the re-sampled turn asked for rows from where the chunk's rows ended, as before the park
    resumed = episode.turns[1]
    assert resumed.routed_experts_start_len == rows_first
    assert np.array_equal(resumed.prompt_ids[: len(first[0])], first[0])

    result = tito.stitch_turns(episode.turns, reward=0.5, task_id="t", family="f", trial_id="t__1")
    (sample,) = result.samples
    sample.validate()  # lengths equal, routing rows = tokens - 1, masked positions carry log-prob 0
    check_routing(
        sample.routing,
        num_tokens=sample.num_tokens,
        num_layers=engine.num_layers,
        top_k=engine.top_k,
        num_experts=engine.num_experts,
    )
    assert sample.policy_versions_mixed and sample.policy_version == 0
    assert result.audit.drifted_loss_tokens == 0
    # the earlier rows are the first turn's, untouched; its loss tokens carry its own log-probs
    assert np.array_equal(sample.routing[:rows_first], first[3].astype(sample.routing.dtype))
    n_prompt, n_out = len(first[0]), len(first[1])
    assert np.array_equal(sample.token_ids[n_prompt : n_prompt + n_out], first[1].astype(np.int32))
    assert np.array_equal(sample.rollout_logprobs[n_prompt : n_prompt + n_out], first[2].astype(np.float32))
    assert int(sample.loss_mask.sum()) == sum(len(t.output_ids) for t in episode.turns)
