"""The second harness behaviour of T1 §4.1: a stock template prunes reasoning before the last user message.

A harness that re-renders the whole conversation with such a template (here the packaged ``qwen3_5_stock``,
on the real Qwen3.5 vocabulary) drops the previous turn's think block from every new prompt, since it emits
one user message per observation. With thinking off the block was empty, and the boundary is the
normalized case with s = 4; with reasoning, the next prompt holds none of it and the boundary splits.
"""

import pytest

from t1_spec import TitoSpec
from t1_tito import ChatTemplate, TemplateError, TitoSession, Turn, stitch

META = {"task_id": "t", "family": "f", "trial_id": "trial-3", "reward": 1.0}
SPEC = TitoSpec()
ANSWERS = ["ls -la /srv/app", "grep -rn TODO src | head", "git log --oneline -n 3", "echo done"]
REASONING = (
    "The task needs the list of files first, then the notes; I will run one command per turn and check it."
)


@pytest.fixture(scope="module")
def stock():
    return ChatTemplate(name="qwen3_5_stock")


def rerendering_harness(tok, template, *, thinking):
    """Turns of a harness that renders the full conversation every turn (no TITO session)."""
    messages = [
        {"role": "system", "content": "You are a terminal agent."},
        {"role": "user", "content": "Go."},
    ]
    turns = []
    for k, answer in enumerate(ANSWERS):
        text = template.render(
            messages, add_generation_prompt=True, thinking=thinking, escape=tok.escape_content
        )
        prompt = tok.encode_chat(text)
        if thinking:  # the model closes its think block with the control id </think> it emits itself
            sampled = tok.encode(REASONING + "\n") + [tok.token_id("</think>")] + tok.encode("\n\n" + answer)
        else:
            sampled = tok.encode(answer)
        sampled = sampled + [tok.im_end_id]
        turns.append(
            Turn(
                prompt_ids=prompt,
                output_ids=sampled,
                output_logprobs=[-0.25] * len(sampled),
                policy_version=1,
                finish_reason="stop",
            )
        )
        reply = {"role": "assistant", "content": answer, "reasoning_content": REASONING if thinking else ""}
        messages += [reply, {"role": "user", "content": f"$ {answer}\nobservation {k}"}]
    return turns


def test_the_stock_template_is_not_append_only(tok, stock):
    session = TitoSession(tok, stock)
    with pytest.raises(TemplateError, match="not append-only"):
        first = session.start([{"role": "user", "content": "Go."}])
        session.next_prompt(first, [1, tok.im_end_id], [{"role": "user", "content": "observation"}])


def test_pruned_empty_think_blocks_are_normalized_into_one_chunk(tok, stock):
    turns = rerendering_harness(tok, stock, thinking=False)
    think_block = tok.encode_chat("<think>\n\n</think>\n\n")
    assert len(think_block) == 4  # the s every boundary needs: <think>, \n\n, </think>, \n\n
    assert turns[0].prompt_ids[-4:] == think_block
    result = stitch(
        turns,
        repair="retokenized",
        normalize_max_s=SPEC.normalize_max_s,
        normalize_max_u=SPEC.normalize_max_u,
        tokenizer=tok,
        **META,
    )
    assert [(c.kind, c.s, c.u) for c in result.boundaries] == [("normalized", 4, 0)] * 3
    (sample,) = result.samples
    audit = result.audit
    assert audit.drifted_loss_tokens == 0 and audit.chunks == 1
    assert audit.dropped_context_tokens == 3 * 4 and audit.retokenized_context_tokens == 0
    # Independently: after turn i the stream holds p_i, a_i, and then p_(i+1) past drop_4(p_i) || a_i.
    expected = list(turns[0].prompt_ids) + list(turns[0].output_ids)
    for prev, nxt in zip(turns, turns[1:], strict=False):
        expected += nxt.prompt_ids[len(prev.prompt_ids) - 4 + len(prev.output_ids) :] + list(nxt.output_ids)
    assert sample.token_ids.tolist() == expected
    assert audit.affected_loss_tokens == sum(len(t.output_ids) for t in turns[1:])


def test_the_same_turns_split_under_strict_each_chunk_exact(tok, stock):
    turns = rerendering_harness(tok, stock, thinking=False)
    result = stitch(turns, **META)
    assert result.audit.splits == 3 and len(result.samples) == 4
    for t, s in zip(turns, result.samples, strict=True):
        assert s.token_ids.tolist() == list(t.prompt_ids) + list(t.output_ids)


def test_pruned_reasoning_splits_and_every_chunk_is_what_inference_saw(tok, stock):
    turns = rerendering_harness(tok, stock, thinking=True)
    assert tok.token_id("</think>") in turns[0].output_ids  # the sampled answer holds its reasoning
    result = stitch(
        turns,
        repair="retokenized",
        normalize_max_s=SPEC.normalize_max_s,
        normalize_max_u=SPEC.normalize_max_u,
        tokenizer=tok,
        **META,
    )
    assert [c.kind for c in result.boundaries] == ["split"] * 3
    assert result.audit.drifted_loss_tokens == 0 and result.audit.affected_loss_tokens == 0
    for t, s in zip(turns, result.samples, strict=True):
        assert s.token_ids.tolist() == list(t.prompt_ids) + list(t.output_ids)
