"""The agent loop against a scripted engine and shell: TITO prompts, parse errors, confirmation, limits."""

import json

import numpy as np
import pytest

from t1_rollout.engine.base import Generation, SamplingParams
from t1_rollout.harness import COMPLETE_CONFIRM, HarnessConfig, run_episode
from t1_tito import ChatTemplate, TitoSession, load_tokenizer, stitch

L, K = 4, 2


class ScriptedEngine:
    """Answers with scripted texts; routing rows follow SGLang: [start_len, len(prompt)+len(out)-1)."""

    def __init__(self, tokenizer, answers):
        self.tokenizer = tokenizer
        self.answers = list(answers)
        self.weight_version = 7
        self.calls = []

    async def generate(
        self,
        input_ids,
        sampling,
        *,
        return_logprob=True,
        return_routed_experts=True,
        routed_experts_start_len=0,
    ):
        self.calls.append((list(input_ids), routed_experts_start_len))
        text = self.answers.pop(0)
        out = self.tokenizer.encode(text)[: sampling.max_new_tokens - 1] + [self.tokenizer.im_end_id]
        rows = len(input_ids) + len(out) - 1 - routed_experts_start_len
        routing = np.tile(np.arange(K, dtype=np.int32), (rows, L, 1))
        return Generation(
            output_ids=out,
            output_logprobs=[-0.5] * len(out),
            routed_experts=routing,
            routed_experts_start_len=routed_experts_start_len,
            weight_version=self.weight_version,
            finish_reason="stop",
            prompt_tokens=len(input_ids),
            completion_tokens=len(out),
            latency_s=0.0,
        )


class FakeShell:
    def __init__(self):
        self.sent = []

    async def send(self, keystrokes, *, duration_s, max_wait_s):
        self.sent.append(keystrokes)
        return f"$ {keystrokes}out-{len(self.sent)}\n" if keystrokes else "$ "

    async def close(self):
        pass


def _action(cmd=None, done=False):
    cmds = [] if cmd is None else [{"keystrokes": cmd, "duration": 0.1}]
    return json.dumps({"analysis": "a", "plan": "p", "commands": cmds, "task_complete": done})


@pytest.fixture(scope="module")
def tito():
    return TitoSession(load_tokenizer("qwen3.5"), ChatTemplate())


def _config(**kw):
    base = dict(
        max_turns=6, agent_deadline_s=60, max_new_tokens=200, context_tokens=4000, observation_max_bytes=500
    )
    base.update(kw)
    return HarnessConfig(**base)


async def test_prompts_are_strict_prefix_extensions_and_stitch_without_drift(tito):
    engine = ScriptedEngine(
        tito.tokenizer, [_action("ls\n"), "not json", _action(done=True), _action(done=True)]
    )
    shell = FakeShell()
    ep = await run_episode(
        instruction="do it",
        shell=shell,
        engine=engine,
        tito=tito,
        sampling=SamplingParams(),
        config=_config(),
    )
    assert ep.finish == "task_complete"
    assert len(ep.turns) == 4
    assert ep.parse_failures == 1
    for prev, nxt in zip(ep.turns, ep.turns[1:], strict=False):
        full = prev.prompt_ids.tolist() + prev.output_ids.tolist()  # the harness hands arrays
        assert nxt.prompt_ids[: len(full)].tolist() == full  # TITO strict case (T1 §4.1)
        # one append-only buffer: the next prompt's head is the very memory of the previous prompt, so the
        # stitcher recognises the shared prefix without comparing it (linear-time stitching)
        assert isinstance(nxt.prompt_ids, np.ndarray) and np.shares_memory(prev.prompt_ids, nxt.prompt_ids)
    # the harness asks the engine only for rows it has not seen yet
    starts = [s for _, s in engine.calls]
    assert starts[0] == 0 and all(b > a for a, b in zip(starts, starts[1:], strict=False))
    result = stitch(ep.turns, reward=0.25, task_id="t", family="f", trial_id="t__1")
    assert result.chunks_split == 0 and len(result.samples) == 1
    assert result.audit.drifted_loss_tokens == 0
    sample = result.samples[0]
    sample.validate()
    assert sample.routing.shape == (len(sample.token_ids) - 1, L, K)
    assert int(sample.loss_mask.sum()) == sum(len(t.output_ids) for t in ep.turns)


async def test_parse_error_costs_a_turn_and_is_reported_to_the_model(tito):
    engine = ScriptedEngine(tito.tokenizer, ["garbage", "more garbage"])
    ep = await run_episode(
        instruction="x",
        shell=FakeShell(),
        engine=engine,
        tito=tito,
        sampling=SamplingParams(),
        config=_config(max_turns=2),
    )
    assert ep.finish == "max_turns" and ep.parse_failures == 2
    assert "parsing errors" in ep.messages[3]["content"]


async def test_task_complete_needs_confirmation(tito):
    engine = ScriptedEngine(tito.tokenizer, [_action(done=True), _action("echo hi\n"), _action(done=True)])
    ep = await run_episode(
        instruction="x",
        shell=FakeShell(),
        engine=engine,
        tito=tito,
        sampling=SamplingParams(),
        config=_config(max_turns=3),
    )
    assert ep.messages[3]["content"] == COMPLETE_CONFIRM
    assert ep.finish == "max_turns"  # the second task_complete was not consecutive


async def test_commands_reach_the_persistent_shell_and_output_is_truncated(tito):
    engine = ScriptedEngine(tito.tokenizer, [_action("cd /tmp\n"), _action("pwd\n")])
    shell = FakeShell()
    await run_episode(
        instruction="x",
        shell=shell,
        engine=engine,
        tito=tito,
        sampling=SamplingParams(),
        config=_config(max_turns=2),
    )
    assert shell.sent == ["", "cd /tmp\n", "pwd\n"]


async def test_context_budget_ends_the_episode(tito):
    engine = ScriptedEngine(tito.tokenizer, [_action("ls\n")] * 5)
    ep = await run_episode(
        instruction="x",
        shell=FakeShell(),
        engine=engine,
        tito=tito,
        sampling=SamplingParams(),
        config=_config(context_tokens=260, max_new_tokens=60),
    )
    assert ep.finish == "context_exhausted"
    assert all(len(t.prompt_ids) + len(t.output_ids) <= 260 for t in ep.turns)
