"""The OpenAI-compatible endpoint: a harness drives a scripted engine over HTTP; the capture and stitching.

The harness here is the official ``openai`` client over real HTTP on loopback; the model is a scripted engine
that emits the ids of given texts (special tokens as control ids, as a Qwen model emits ``<tool_call>``).
What is under test is what the endpoint keeps behind each call and how the trial's sample is stitched from
it: TITO's boundary cases (T1 §4.1) and the R3 rows (T1 §4.2).
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
import numpy as np
import openai
import pytest

from t1_rollout.endpoint import EndpointServer, TrialCapture
from t1_rollout.engine.base import EngineError, Generation, SamplingParams
from t1_rollout.harness import Episode, HarnessConfig
from t1_tito import ChatTemplate, TitoSession, load_tokenizer

L, K = 3, 2
BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a bash command",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}


def tool_answer(command: str, thought: str = "Let me look.") -> str:
    args = json.dumps({"name": "bash", "arguments": {"command": command}})
    return f"{thought}\n<tool_call>\n{args}\n</tool_call>"


class ScriptedEngine:
    """Emits the ids of scripted texts then ``<|im_end|>``; routing rows follow SGLang's semantics."""

    def __init__(self, tokenizer, answers, *, fail_at: int | None = None):
        self.tokenizer = tokenizer
        self.answers = list(answers)
        self.weight_version = 3
        self.calls: list[tuple[list[int], int]] = []
        self.fail_at = fail_at

    async def generate(
        self,
        input_ids,
        sampling,
        *,
        return_logprob=True,
        return_routed_experts=True,
        routed_experts_start_len=0,
    ):
        if self.fail_at is not None and len(self.calls) == self.fail_at:
            raise EngineError("replica 0 unreachable")
        self.calls.append((list(input_ids), routed_experts_start_len))
        out = self.tokenizer.encode(self.answers.pop(0), allow_special=True) + [self.tokenizer.im_end_id]
        out = out[: sampling.max_new_tokens]
        rows = len(input_ids) + len(out) - 1 - routed_experts_start_len
        # row j holds (position mod 7, layer) so a misaligned row is visible in the stitched stream
        pos = np.arange(routed_experts_start_len, routed_experts_start_len + rows)
        routing = np.stack([np.stack([pos % 7, np.full_like(pos, layer)], -1) for layer in range(L)], 1)
        return Generation(
            output_ids=out,
            output_logprobs=[-0.25] * len(out),
            routed_experts=routing.astype(np.int32),
            routed_experts_start_len=routed_experts_start_len,
            weight_version=self.weight_version,
            finish_reason="stop" if out[-1] == self.tokenizer.im_end_id else "length",
            prompt_tokens=len(input_ids),
            completion_tokens=len(out),
            latency_s=0.0,
        )


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("qwen3.5")


def _tito(tokenizer, repair="retokenized"):
    return TitoSession(tokenizer, ChatTemplate(), repair=repair, normalize_max_s=96, normalize_max_u=16)


def _capture(tokenizer, answers, *, max_turns=8, repair="retokenized", **kw):
    tito = _tito(tokenizer, repair)
    engine = ScriptedEngine(tokenizer, answers, **kw)
    config = HarnessConfig(max_turns=max_turns, agent_deadline_s=60, max_new_tokens=256, context_tokens=8192)
    return TrialCapture(
        engine=engine, tito=tito, sampling=SamplingParams(), config=config, episode=Episode()
    ), engine


def _routing_aligned(sample) -> None:
    """Each stitched row is the row the engine produced for that stream position (independent of stitch)."""
    assert sample.routing.shape == (len(sample.token_ids) - 1, L, K)


async def _drive(client, rounds, *, edit=None, reserialize=False):
    """A minimal tool-calling harness: call, run the tool (echo), append the result, call again."""
    messages = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "List files."},
    ]
    answers = []
    for r in range(rounds):
        resp = await client.chat.completions.create(model="t1", messages=messages, tools=[BASH])
        msg = resp.choices[0].message
        answers.append(resp)
        echoed = msg.model_dump(exclude_none=True)
        if reserialize and msg.tool_calls:
            for call in echoed["tool_calls"]:  # the harness re-serializes the arguments compactly
                call["function"]["arguments"] = json.dumps(
                    json.loads(call["function"]["arguments"]), separators=(",", ":")
                )
        messages.append(echoed)
        for call in msg.tool_calls or []:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": f"file-{r}.txt"})
        if edit is not None and r == edit:  # the harness compacts: it rewrites the task far back in history
            messages[1]["content"] = (
                "List files. (Earlier steps were summarised: the listing showed one file.)"
            )
    return answers, messages


async def test_a_call_without_the_trial_key_is_refused_with_401(tokenizer):
    capture, engine = _capture(tokenizer, [tool_answer("ls")])
    async with EndpointServer() as server:
        key = server.open_trial(capture)
        body = {"model": "t1", "messages": [{"role": "user", "content": "hi"}]}
        async with aiohttp.ClientSession() as http:
            url = f"{server.url}/chat/completions"
            for headers in ({}, {"Authorization": "Bearer t1-not-a-key"}, {"Authorization": key}):
                async with http.post(url, json=body, headers=headers) as resp:
                    assert resp.status == 401
                    assert (await resp.json())["error"]["code"] == "invalid_api_key"
            server.close_trial(key)
            async with http.post(url, json=body, headers={"Authorization": f"Bearer {key}"}) as resp:
                assert resp.status == 401  # a closed trial's key is dead
    assert engine.calls == [] and capture.episode.turns == []


async def test_openai_client_drives_tool_calls_and_every_boundary_is_strict(tokenizer):
    capture, engine = _capture(tokenizer, [tool_answer("ls"), tool_answer("cat a"), "All done."])
    async with EndpointServer() as server:
        async with openai.AsyncOpenAI(base_url=server.url, api_key=server.open_trial(capture)) as client:
            answers, _ = await _drive(client, 3)
    first = answers[0].choices[0]
    assert first.finish_reason == "tool_calls" and first.message.content == "Let me look."
    assert first.message.tool_calls[0].function.name == "bash"
    assert json.loads(first.message.tool_calls[0].function.arguments) == {"command": "ls"}
    assert (
        answers[2].choices[0].finish_reason == "stop" and answers[2].choices[0].message.content == "All done."
    )
    turns = capture.episode.turns
    assert [c.prompt for c in capture.calls] == ["rendered", "tito", "tito"]
    for prev, nxt in zip(turns, turns[1:], strict=False):  # the engine saw the sampled ids themselves
        full = [*prev.prompt_ids.tolist(), *prev.output_ids.tolist()]
        assert nxt.prompt_ids[: len(full)].tolist() == full
    # routing requests start where the previous turn's rows ended (T1 §4.2)
    assert [s for _, s in engine.calls] == [0] + [
        len(t.prompt_ids) + len(t.output_ids) - 1 for t in turns[:-1]
    ]
    result = capture.tito.stitch_turns(turns, reward=1.0, task_id="t", family="f", trial_id="t__1")
    assert result.audit.case_counts["strict"] == 2 and result.audit.splits == 0
    assert result.audit.drifted_loss_tokens == 0
    (sample,) = result.samples
    sample.validate()
    _routing_aligned(sample)
    assert int(sample.loss_mask.sum()) == sum(len(t.output_ids) for t in turns)
    # the stitched stream is the last prompt plus the last answer: ids the engine saw or sampled, nothing else
    last = turns[-1]
    assert sample.token_ids.tolist() == [*last.prompt_ids.tolist(), *last.output_ids.tolist()]
    assert sample.routing[:, 0, 0].tolist() == [j % 7 for j in range(len(sample.token_ids) - 1)]


async def test_a_reserialized_tool_call_is_repaired_never_a_silent_mismatch(tokenizer):
    capture, _ = _capture(tokenizer, [tool_answer("ls -la /tmp"), tool_answer("pwd"), "done"])
    async with EndpointServer() as server:
        async with openai.AsyncOpenAI(base_url=server.url, api_key=server.open_trial(capture)) as client:
            await _drive(client, 3, reserialize=True)
    # the harness's history differs from what the endpoint returned: the prompt is its full render
    assert [c.prompt for c in capture.calls] == ["rendered", "rendered", "rendered"]
    assert capture.calls[1].edited_message == 2  # the assistant message it re-serialized
    turns = capture.episode.turns
    result = capture.tito.stitch_turns(turns, reward=0.5, task_id="t", family="f", trial_id="t__2")
    kinds = [b.kind for b in result.boundaries]
    assert set(kinds) <= {"normalized", "retokenized"}, kinds  # repaired, not strict, not split
    assert result.audit.drifted_loss_tokens == 0
    (sample,) = result.samples
    sample.validate()
    _routing_aligned(sample)
    # the sampled ids are in the stream, not the harness's compact copy of them
    sampled = turns[0].output_ids.tolist()
    stream = sample.token_ids.tolist()
    start = len(turns[0].prompt_ids)
    assert stream[start : start + len(sampled)] == sampled
    assert sample.loss_mask[start : start + len(sampled)].all()


async def test_a_harness_that_edits_an_earlier_turn_gets_a_split_counted_in_the_audit(tokenizer):
    answers = [tool_answer("ls"), tool_answer("cat file-0.txt"), tool_answer("wc -l f"), "done"]
    capture, _ = _capture(tokenizer, answers)
    async with EndpointServer() as server:
        async with openai.AsyncOpenAI(base_url=server.url, api_key=server.open_trial(capture)) as client:
            await _drive(client, 4, edit=1)  # after the second answer, the task message is rewritten
    assert [c.prompt for c in capture.calls] == ["rendered", "tito", "rendered", "tito"]
    assert capture.calls[2].edited_message == 1
    result = capture.tito.stitch_turns(
        capture.episode.turns, reward=0.0, task_id="t", family="f", trial_id="t__3"
    )
    assert [b.kind for b in result.boundaries] == ["strict", "split", "strict"]
    assert result.audit.splits == 1 and len(result.samples) == 2
    assert result.audit.drifted_loss_tokens == 0
    for sample in result.samples:
        sample.validate()
        _routing_aligned(sample)


async def test_streaming_answers_carry_the_same_message(tokenizer):
    capture, _ = _capture(tokenizer, [tool_answer("ls")])
    async with EndpointServer() as server:
        async with openai.AsyncOpenAI(base_url=server.url, api_key=server.open_trial(capture)) as client:
            stream = await client.chat.completions.create(
                model="t1", messages=[{"role": "user", "content": "go"}], tools=[BASH], stream=True
            )
            content, calls, reason = "", [], None
            async for chunk in stream:
                delta = chunk.choices[0].delta
                content += delta.content or ""
                calls += delta.tool_calls or []
                reason = chunk.choices[0].finish_reason or reason
    assert content == "Let me look." and reason == "tool_calls"
    assert calls[0].function.name == "bash" and json.loads(calls[0].function.arguments) == {"command": "ls"}
    assert len(capture.episode.turns) == 1


async def test_max_turns_ends_the_episode_and_later_calls_are_refused(tokenizer):
    capture, engine = _capture(tokenizer, [tool_answer("ls"), tool_answer("ls")], max_turns=1)
    async with EndpointServer() as server:
        async with openai.AsyncOpenAI(
            base_url=server.url, api_key=server.open_trial(capture), max_retries=0
        ) as client:
            with pytest.raises(openai.APIStatusError) as info:
                await _drive(client, 2)
    assert info.value.status_code == 409
    assert capture.episode.finish == "max_turns" and capture.ended.is_set()
    assert len(engine.calls) == 1


async def test_an_engine_failure_is_kept_for_the_trial(tokenizer):
    capture, _ = _capture(tokenizer, [tool_answer("ls")], fail_at=0)
    async with EndpointServer() as server:
        async with openai.AsyncOpenAI(
            base_url=server.url, api_key=server.open_trial(capture), max_retries=0
        ) as client:
            with pytest.raises(openai.InternalServerError):
                await _drive(client, 1)
    assert isinstance(capture.error, EngineError) and capture.ended.is_set()
    assert capture.episode.turns == []


async def test_text_parts_and_the_developer_role_render_as_plain_messages(tokenizer):
    capture, engine = _capture(tokenizer, ["hello", "again"])
    parts = [
        {
            "role": "developer",
            "content": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}],
        },
        {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
    ]
    plain = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    image = {"type": "image_url", "image_url": {"url": "data:,"}}
    async with EndpointServer() as server:
        key = server.open_trial(capture)
        async with openai.AsyncOpenAI(base_url=server.url, api_key=key, max_retries=0) as client:
            await client.chat.completions.create(model="t1", messages=parts)
            with pytest.raises(openai.BadRequestError, match="only text parts"):
                await client.chat.completions.create(
                    model="t1", messages=[{"role": "user", "content": [image]}]
                )
    assert engine.calls[0][0] == capture.tito.start(plain)  # the same ids as the plain messages
    assert len(engine.calls) == 1


def test_parse_reply_reads_reasoning_content_and_tool_calls_back():
    from t1_rollout.endpoint import parse_reply

    call = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'
    reply = parse_reply(f"I should list.\n</think>\n\nListing.\n{call}", thinking=True, call_prefix="7")
    assert (reply.reasoning, reply.content) == ("I should list.", "Listing.")
    assert reply.tool_calls == [
        {"id": "call_7_0", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    ]
    # a block that is not a JSON call stays text the harness sees; no call is invented
    broken = parse_reply("<tool_call>\n{not json}\n</tool_call>", thinking=False, call_prefix="8")
    assert broken.tool_calls == [] and broken.content == "<tool_call>\n{not json}\n</tool_call>"
    # without a think block opened by the prompt, '</think>' is content
    assert parse_reply("a</think>b", thinking=False, call_prefix="9").content == "a</think>b"


async def test_a_harness_that_drops_reasoning_gets_a_split_not_a_silent_mismatch(tokenizer):
    """T1 §4.1's template-prunes-reasoning behaviour: the harness sends the answer back without its think."""
    tito = TitoSession(
        tokenizer, ChatTemplate(), thinking=True, repair="retokenized", normalize_max_s=96, normalize_max_u=16
    )
    think = "The user wants the files listed, so the first step is an ls of the working directory."
    engine = ScriptedEngine(tokenizer, [f"{think}\n</think>\n\n{tool_answer('ls')}", "done"])
    config = HarnessConfig(max_turns=8, agent_deadline_s=60, max_new_tokens=256, context_tokens=8192)
    capture = TrialCapture(
        engine=engine, tito=tito, sampling=SamplingParams(), config=config, episode=Episode()
    )
    async with EndpointServer() as server:
        key = server.open_trial(capture)
        async with openai.AsyncOpenAI(base_url=server.url, api_key=key) as client:
            messages = [{"role": "user", "content": "List files."}]
            first = (
                await client.chat.completions.create(model="t1", messages=messages, tools=[BASH])
            ).choices[0]
            assert first.message.model_extra["reasoning_content"] == think
            echoed = {
                "role": "assistant",
                "content": first.message.content,
                "tool_calls": [c.model_dump() for c in first.message.tool_calls],
            }  # no reasoning_content: pruned, as stock templates do before the last user message
            call_id = first.message.tool_calls[0].id
            messages += [echoed, {"role": "tool", "tool_call_id": call_id, "content": "a.txt"}]
            await client.chat.completions.create(model="t1", messages=messages, tools=[BASH])
    assert [c.prompt for c in capture.calls] == ["rendered", "rendered"]
    result = tito.stitch_turns(capture.episode.turns, reward=0.0, task_id="t", family="f", trial_id="t__4")
    assert [b.kind for b in result.boundaries] == ["split"] and result.audit.splits == 1
    assert result.audit.drifted_loss_tokens == 0
    for sample in result.samples:
        sample.validate()
        _routing_aligned(sample)


async def test_a_call_in_flight_when_the_trial_parks_is_sampled_again_after_the_resume(tokenizer):
    """Partial-rollout continuation (T1 §10) at the endpoint: the call is the turn boundary."""
    from t1_rollout.parking import Parking

    class ParkOnSecondCall(ScriptedEngine):
        async def generate(self, input_ids, sampling, **kw):
            if len(self.calls) == 1 and not parking.parks:
                parking.ask()  # the request is in flight when the scheduler asks
                await asyncio.sleep(3600)  # aborted by the park, never answered
            return await super().generate(input_ids, sampling, **kw)

    parking = Parking()
    engine = ParkOnSecondCall(tokenizer, [tool_answer("ls"), tool_answer("pwd")])
    config = HarnessConfig(max_turns=8, agent_deadline_s=60, max_new_tokens=256, context_tokens=8192)
    capture = TrialCapture(
        engine=engine, tito=_tito(tokenizer), sampling=SamplingParams(), config=config, episode=Episode(),
        parking=parking,
    )  # fmt: skip
    async with EndpointServer() as server:
        key = server.open_trial(capture)
        async with openai.AsyncOpenAI(base_url=server.url, api_key=key, max_retries=0) as client:
            harness = asyncio.ensure_future(_drive(client, 2))
            await asyncio.wait_for(parking.wait_parked(), timeout=30)
            assert len(capture.episode.turns) == 1 and capture.episode.resampled_turns == 1
            engine.weight_version = 4  # the step's publication
            parking.resume()
            await asyncio.wait_for(harness, timeout=30)
    assert [t.policy_version for t in capture.episode.turns] == [3, 4]
    assert [c.prompt for c in capture.calls] == ["rendered", "tito"]
    result = capture.tito.stitch_turns(
        capture.episode.turns, reward=0.0, task_id="t", family="f", trial_id="t__5"
    )
    assert result.audit.case_counts["strict"] == 1 and result.audit.drifted_loss_tokens == 0


async def test_exec_runs_in_the_trials_sandbox_only_while_the_episode_runs(tokenizer):
    from t1_sandbox.base import ExecResult

    class Sandbox:
        def __init__(self):
            self.calls = []

        async def exec(self, command, *, timeout_s, cwd=None, env=None, cpu_time_s=None):
            self.calls.append((command, timeout_s, cwd, env))
            return ExecResult("out\n", "err\n", 0, False, 0.0)

    capture, _ = _capture(tokenizer, [])
    sandbox = Sandbox()
    async with EndpointServer() as server, aiohttp.ClientSession() as http:
        key = server.open_trial(capture, sandbox=sandbox, exec_timeout_s=30)
        bare = server.open_trial(_capture(tokenizer, [])[0])  # a trial without a sandbox
        auth = {"Authorization": f"Bearer {key}"}
        body = {"command": "ls", "cwd": "/app", "env": {"A": "1"}, "timeout_s": 999}
        async with http.post(server.exec_url, json=body, headers=auth) as resp:
            assert resp.status == 200 and (await resp.json())["stdout"] == "out\n"
        assert sandbox.calls == [("ls", 30.0, "/app", {"A": "1"})]  # the deadline is capped by the trial's
        async with http.post(server.exec_url, json={"command": ""}, headers=auth) as resp:
            assert resp.status == 400
        raw_json = {**auth, "Content-Type": "application/json"}
        for deadline in ("NaN", "Infinity", "-Infinity", "1e400"):  # what Python's json reads as non-finite
            raw = '{"command": "sleep 5", "timeout_s": ' + deadline + "}"
            async with http.post(server.exec_url, data=raw, headers=raw_json) as resp:
                assert resp.status == 400 and "finite" in (await resp.text()), deadline
        huge = '{"command": "ls", "timeout_s": 1' + "0" * 400 + "}"
        async with http.post(server.exec_url, data=huge, headers=raw_json) as resp:
            assert resp.status == 200  # an int too large for a float is capped, not an overflow
        async with http.post(server.exec_url, json=body) as resp:
            assert resp.status == 401
        async with http.post(server.exec_url, json=body, headers={"Authorization": f"Bearer {bare}"}) as resp:
            assert resp.status == 404
        capture.end("max_turns")
        async with http.post(server.exec_url, json=body, headers=auth) as resp:
            assert resp.status == 409
    assert len(sandbox.calls) == 2 and sandbox.calls[1] == ("ls", 30.0, None, None)
