"""Context compaction in the agent loop (T1 §6, §9): the summary turn, the new chunk, each failure counted."""

import json

import numpy as np
import pytest

from t1_rollout.compaction import CAUSES, CompactionAttempt, CompactionConfig, compaction_metrics
from t1_rollout.engine.base import EngineError, Generation, SamplingParams
from t1_rollout.harness import Episode, HarnessConfig, compacted_messages, initial_messages, run_episode
from t1_spec import RolloutSpec
from t1_tito import ChatTemplate, TitoSession, load_tokenizer, stitch

L, K = 4, 2
REQUEST_MARK = "will be replaced by a summary"  # words of the summary request (t1_rollout.compaction)
SUMMARY = "I listed the directory and found data.csv; next I sum the totals."


class CompactingEngine:
    """Scripted answers; a prompt that ends with the summary request gets the next scripted summary.

    A summary entry is a text (ends with ``<|im_end|>``), ``("length", text)`` (stops at the cap without a
    stop id, finish ``"length"``) or an exception to raise. Routing rows follow SGLang: ``[start_len,
    len(prompt) + len(out) - 1)``.
    """

    def __init__(self, tokenizer, answers, summaries=()):
        self.tokenizer = tokenizer
        self.answers = list(answers)
        self.summaries = list(summaries)
        self.weight_version = 3
        self.calls = []  # (prompt ids, routed_experts_start_len, max_new_tokens, was a summary request)

    async def generate(self, input_ids, sampling, *, routed_experts_start_len=0, **_):
        is_summary = REQUEST_MARK in self.tokenizer.decode(list(input_ids[-120:]))
        self.calls.append((list(input_ids), routed_experts_start_len, sampling.max_new_tokens, is_summary))
        entry = (self.summaries if is_summary else self.answers).pop(0)
        if isinstance(entry, Exception):
            raise entry
        finish = "stop"
        if isinstance(entry, tuple):
            finish, text = entry
            out = self.tokenizer.encode(text)[: sampling.max_new_tokens]
        else:
            out = self.tokenizer.encode(entry)[: sampling.max_new_tokens - 1] + [self.tokenizer.im_end_id]
        rows = len(input_ids) + len(out) - 1 - routed_experts_start_len
        return Generation(
            output_ids=out,
            output_logprobs=[-0.25] * len(out),
            routed_experts=np.tile(np.arange(K, dtype=np.int32), (rows, L, 1)),
            routed_experts_start_len=routed_experts_start_len,
            weight_version=self.weight_version,
            finish_reason=finish,
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


def _action(cmd=None, done=False, analysis="a"):
    cmds = [] if cmd is None else [{"keystrokes": cmd, "duration": 0.1}]
    return json.dumps({"analysis": analysis, "plan": "p", "commands": cmds, "task_complete": done})


LONG = _action("ls\n", analysis="x " * 50)  # a turn long enough to cross first prompt + 100 on its own


@pytest.fixture(scope="module")
def tito():
    return TitoSession(load_tokenizer("qwen3.5"), ChatTemplate())


@pytest.fixture(scope="module")
def first_prompt(tito):
    """Length of the episode's first prompt (tokens), computed apart from the harness."""
    return len(tito.start(initial_messages("do it", "$ ")))


def _config(threshold, *, summary_max_tokens=64, **kw):
    base = dict(
        max_turns=6,
        agent_deadline_s=60,
        max_new_tokens=120,
        context_tokens=4000,
        observation_max_bytes=500,
        compaction=CompactionConfig(threshold_tokens=threshold, summary_max_tokens=summary_max_tokens),
    )
    base.update(kw)
    return HarnessConfig(**base)


async def _episode(tito, engine, config):
    return await run_episode(
        instruction="do it",
        shell=FakeShell(),
        engine=engine,
        tito=tito,
        sampling=SamplingParams(),
        config=config,
    )


async def test_the_agent_summarises_in_a_turn_of_its_own_and_continues_in_a_new_chunk(tito, first_prompt):
    # the first turn's answer and observation take the context past the threshold: compaction fires once
    engine = CompactingEngine(tito.tokenizer, [LONG, _action(done=True), _action(done=True)], [SUMMARY])
    threshold = first_prompt + 100
    ep = await _episode(tito, engine, _config(threshold))
    assert ep.finish == "task_complete"
    assert [c[3] for c in engine.calls] == [False, True, False, False]
    (attempt,) = ep.compactions
    assert attempt.succeeded and attempt.cause is None and attempt.turn_index == 1 == ep.summary_turns[0]
    first, summary_turn, after = ep.turns[0], ep.turns[1], ep.turns[2]
    # the summary request extends the first chunk (strict prefix), and the summary is what was sampled
    assert summary_turn.prompt_ids[: len(first.prompt_ids) + len(first.output_ids)].tolist() == [
        *first.prompt_ids.tolist(),
        *first.output_ids.tolist(),
    ]
    assert tito.tokenizer.decode(summary_turn.output_ids[:-1].tolist()) == SUMMARY
    # the trigger was the next prompt, the summary request's prompt minus the request
    assert threshold <= attempt.tokens_before < len(summary_turn.prompt_ids)
    # the history is replaced: the task and the summary, not the earlier observation
    text = tito.tokenizer.decode(after.prompt_ids)
    assert "do it" in text and SUMMARY in text and "out-2" not in text and "x x x" not in text
    assert attempt.tokens_after == len(after.prompt_ids) < threshold
    assert attempt.summary_tokens == len(summary_turn.output_ids)
    # the new chunk: flagged, routing asked from position 0 again, no turn before it flagged
    assert [t.starts_chunk for t in ep.turns] == [False, False, True, False]
    assert [c[1] for c in engine.calls][2] == 0
    assert engine.calls[1][2] == 64  # the summary is sampled under its own cap
    # stitched: two chunks, the summary in the first one's loss stream, each chunk carrying the reward (T1 §5)
    result = stitch(ep.turns, reward=0.35, task_id="t", family="f", trial_id="t__1")
    assert len(result.samples) == 2 and result.audit.drifted_loss_tokens == 0
    one, two = result.samples
    assert int(one.loss_mask.sum()) == len(first.output_ids) + len(summary_turn.output_ids)
    assert int(two.loss_mask.sum()) == sum(len(t.output_ids) for t in ep.turns[2:])
    assert [s.reward for s in result.samples] == [0.35, 0.35]
    assert all(int(s.loss_mask[s.reward_index]) == 1 for s in result.samples)
    np.testing.assert_array_equal(two.token_ids[: len(after.prompt_ids)], after.prompt_ids)


async def test_summary_turns_do_not_count_toward_max_turns(tito, first_prompt):
    # the third turn crosses the threshold again, but no turn would read a summary: none is asked for
    engine = CompactingEngine(tito.tokenizer, [LONG, _action("ls\n"), _action("ls\n")], [SUMMARY])
    ep = await _episode(tito, engine, _config(first_prompt + 100, max_turns=3))
    assert ep.finish == "max_turns"
    assert len(ep.turns) == 4 and ep.agent_turns == 3 and ep.summary_turns == [1]
    assert len(ep.compactions) == 1


async def test_a_second_compaction_opens_a_third_chunk(tito, first_prompt):
    # each compacted context plus one more turn crosses the threshold again
    engine = CompactingEngine(tito.tokenizer, [_action("ls\n")] * 3, [SUMMARY, SUMMARY])
    ep = await _episode(tito, engine, _config(first_prompt + 40, max_turns=3))
    assert [c.succeeded for c in ep.compactions] == [True, True] and ep.summary_turns == [1, 3]
    assert [t.starts_chunk for t in ep.turns] == [False, False, True, False, True]
    result = stitch(ep.turns, reward=1.0, task_id="t", family="f", trial_id="t__1")
    assert len(result.samples) == 3


@pytest.mark.parametrize(
    ("summary", "cause", "config_kw"),
    [
        (("length", "word " * 200), "token_cap", {}),
        ("   ", "empty", {}),
        (SUMMARY + " more" * 60, "too_long", {"summary_max_tokens": 400}),
        (SUMMARY, "no_room", {"context_tokens": None}),
    ],
    ids=["token_cap", "empty", "too_long", "no_room"],
)
async def test_a_failed_summary_ends_the_episode_and_names_its_cause(
    tito, first_prompt, summary, cause, config_kw
):
    threshold = first_prompt + 40
    if config_kw.get("context_tokens", 0) is None:
        config_kw = {"context_tokens": threshold + 50, "max_new_tokens": 30}  # the request leaves < 8 tokens
        engine = CompactingEngine(tito.tokenizer, ["not json " * 40], [summary])
    else:
        engine = CompactingEngine(tito.tokenizer, [_action("ls\n"), _action("pwd\n")], [summary])
    ep = await _episode(tito, engine, _config(threshold, **config_kw))
    assert ep.finish == "compaction_failed"  # never continues with a truncated history
    (attempt,) = ep.compactions
    assert attempt.cause == cause and not attempt.succeeded and attempt.tokens_after is None
    assert attempt.detail  # said in words
    assert not any(t.starts_chunk for t in ep.turns)
    sampled = cause != "no_room"
    assert len(ep.turns) == 1 + sampled and ep.summary_turns == ([1] if sampled else [])
    m = compaction_metrics(ep.compactions, max_failure_rate=0.1)
    assert m["compaction_attempts"] == 1 and m["compaction_failed"] == 1 and m["compaction_succeeded"] == 0
    assert m["compaction_failures"] == {c: int(c == cause) for c in CAUSES}
    assert m["compaction_failure_rate"] == 1.0
    assert cause in m["compaction_warning"] and "compaction_max_failure_rate 0.1" in m["compaction_warning"]
    # a failed summary is still the policy's sample: stitched into the chunk it closes
    if sampled:
        (sample,) = stitch(ep.turns, reward=0.0, task_id="t", family="f", trial_id="t__1").samples
        assert int(sample.loss_mask.sum()) == sum(len(t.output_ids) for t in ep.turns)


async def test_an_engine_error_during_the_summary_is_recorded_then_propagates(tito, first_prompt):
    engine = CompactingEngine(tito.tokenizer, [_action("ls\n")], [EngineError("replica lost")])
    episode = Episode()
    with pytest.raises(EngineError, match="replica lost"):
        await run_episode(
            instruction="do it",
            shell=FakeShell(),
            engine=engine,
            tito=tito,
            sampling=SamplingParams(),
            config=_config(first_prompt + 40),
            episode=episode,
        )
    (attempt,) = episode.compactions
    assert attempt.cause == "engine_error" and "replica lost" in attempt.detail
    assert compaction_metrics(episode.compactions)["compaction_failures"]["engine_error"] == 1


async def test_without_compaction_the_context_is_exhausted_as_before(tito, first_prompt):
    engine = CompactingEngine(tito.tokenizer, [_action("ls\n")] * 6)
    ep = await _episode(
        tito, engine, _config(first_prompt + 40, compaction=None, context_tokens=first_prompt + 150)
    )
    assert ep.finish == "context_exhausted" and ep.compactions == []
    assert not any(c[3] for c in engine.calls)


def test_metrics_count_every_attempt_and_warn_only_above_the_rate():
    ok = CompactionAttempt(1, 3600, 400, 120)
    bad = CompactionAttempt(5, 3700, None, 96, "token_cap", "cap")
    m = compaction_metrics([ok, ok, ok, bad], max_failure_rate=0.25)
    assert (m["compaction_attempts"], m["compaction_succeeded"], m["compaction_failed"]) == (4, 3, 1)
    assert m["compaction_failure_rate"] == 0.25 and m["compaction_warning"] is None  # at the rate, not above
    assert m["compaction_tokens_before_mean"] == (3 * 3600 + 3700) / 4
    assert (
        m["compaction_tokens_after_mean"] == 400 and m["compaction_summary_tokens_mean"] == (3 * 120 + 96) / 4
    )
    assert compaction_metrics([ok, bad], max_failure_rate=0.25)["compaction_warning"].startswith("1 of 2")
    empty = compaction_metrics([])
    assert empty["compaction_attempts"] == 0 and empty["compaction_failure_rate"] is None


def test_the_harness_compacts_at_the_recipe_threshold():
    from pathlib import Path

    from t1_spec import load_recipe

    rollout = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "tiny-cpu.yaml").rollout
    cfg = HarnessConfig.from_spec(rollout).compaction
    assert cfg == CompactionConfig(rollout.compaction_threshold_tokens, rollout.max_new_tokens)
    capped = RolloutSpec(**{**rollout.model_dump(), "compaction_summary_max_tokens": 50})
    assert HarnessConfig.from_spec(capped).compaction.summary_max_tokens == 50


async def test_a_batch_reports_compactions_failures_and_chunks_per_trajectory(tito, first_prompt):
    """Scheduler level: four trials; one compacts, one's summary hits its cap, one's engine fails in it."""
    from dataclasses import dataclass

    from t1_rollout.scheduler import SchedulerConfig, collect_batch

    @dataclass(frozen=True)
    class FakeTask:
        id: str
        category: str

    scripts = {
        "compacts": ([LONG, _action(done=True), _action(done=True)], [SUMMARY]),
        "capped": ([_action("ls\n"), _action("ls\n")], [("length", "word " * 200)]),
        "plain": ([_action(done=True), _action(done=True)], []),
        "broken": ([_action("ls\n")], [EngineError("replica lost")]),
    }
    thresholds = {"compacts": first_prompt + 100, "capped": first_prompt + 40, "plain": first_prompt + 100}

    class Source:
        def draw(self, n):
            return [(0, FakeTask(k, "f")) for k in scripts][:n]

    async def run_one(task, record):
        answers, summaries = scripts[task.id]
        record.episode = Episode()
        try:
            await run_episode(
                instruction="do it",
                shell=FakeShell(),
                engine=CompactingEngine(tito.tokenizer, answers, summaries),
                tito=tito,
                sampling=SamplingParams(),
                config=_config(thresholds.get(task.id, first_prompt + 40)),
                episode=record.episode,
            )
        except EngineError as exc:
            record.status, record.cause = "failed", f"agent: EngineError: {exc}"
            return record
        record.stitch = stitch(
            record.episode.turns, reward=0.5, task_id=task.id, family="f", trial_id=task.id
        )
        record.status = "finished"
        return record

    config = SchedulerConfig(
        launched=4, admitted=4, concurrency=4, creation_rate_per_s=1000, creation_quota_per_min=60000
    )
    batch = await collect_batch(Source(), run_one, config)
    m = batch.metrics(compaction_max_failure_rate=0.1)
    # three attempts: one succeeded; the failed trial's engine error is counted, not lost with the trial
    assert (m["compaction_attempts"], m["compaction_succeeded"], m["compaction_failed"]) == (3, 1, 2)
    assert m["compaction_failures"] == {
        "token_cap": 1,
        "too_long": 0,
        "empty": 0,
        "engine_error": 1,
        "no_room": 0,
    }
    assert m["compaction_failure_rate"] == pytest.approx(2 / 3)
    assert "2 of 3 compaction attempts failed" in m["compaction_warning"]
    assert m["finish_reasons"] == {"task_complete": 2, "compaction_failed": 1}
    # admitted: the compacted trajectory has 2 chunks, the others 1 each; every chunk carries the reward
    assert (m["chunks_per_trajectory_mean"], m["chunks_per_trajectory_max"]) == (4 / 3, 2)
    assert m["samples"] == 4 and all(s.reward == 0.5 for r in batch.admitted for s in r.samples)
    # after: the compacted prompt, rendered apart from the harness; before: each trigger at its threshold
    assert m["compaction_tokens_after_mean"] == len(tito.start(compacted_messages("do it", SUMMARY)))
    records = batch.admitted + batch.failed
    befores = [
        (c.tokens_before, thresholds.get(r.task_id, first_prompt + 40))
        for r in records
        for c in r.episode.compactions
    ]
    assert len(befores) == 3 and all(b >= t for b, t in befores)
    assert m["compaction_tokens_before_mean"] == pytest.approx(sum(b for b, _ in befores) / 3)
    json.dumps(m)
    assert batch.metrics()["compaction_warning"] is None  # no threshold given, no warning


async def test_the_trainer_gives_every_chunk_of_a_compacted_trajectory_the_reward(tito, first_prompt):
    """T1 §5.2: the scalar sits on the last response token of each chunk; GAE (gamma = lambda = 1) then gives
    every loss token of both chunks ``R - V``, so with zero values each chunk's advantages are ``R``."""
    advantages = pytest.importorskip("t1_trainer.advantages")
    from t1_spec import GAEAdvantageSpec

    engine = CompactingEngine(tito.tokenizer, [LONG, _action(done=True), _action(done=True)], [SUMMARY])
    ep = await _episode(tito, engine, _config(first_prompt + 100))
    samples = stitch(ep.turns, reward=0.35, task_id="t", family="f", trial_id="t__1").samples
    assert len(samples) == 2
    values = [np.zeros(len(s.token_ids), dtype=np.float32) for s in samples]
    advs, rets = advantages.GAEEstimator.compute(samples, values, GAEAdvantageSpec())
    for s, a, r in zip(samples, advs, rets, strict=True):
        loss = s.loss_mask.astype(bool)
        np.testing.assert_allclose(a[loss], 0.35, rtol=1e-6)
        np.testing.assert_allclose(r[loss], 0.35, rtol=1e-6)
        assert not a[~loss].any()
