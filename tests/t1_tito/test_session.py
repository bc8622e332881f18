"""TITO session: prompts are built from earlier ids, never re-encoded (T1 §4.1, strict case)."""

import pytest

from t1_tito import ChatTemplate, TemplateError, TitoSession


def sample_canonically(tok, assistant_message):
    """What a model emitting the canonical encoding of the message would return: text ids then <|im_end|>."""
    text = assistant_message["content"]
    for i, call in enumerate(assistant_message.get("tool_calls", [])):
        sep = "\n" if (i or text) else ""
        text += (
            f'{sep}<tool_call>\n{{"name": "{call["name"]}", "arguments": {call["arguments"]}}}\n</tool_call>'
        )
    return tok.encode(text, allow_special=True) + [tok.im_end_id]


CONVERSATION = [
    # (assistant reply, messages appended after it)
    ({"role": "assistant", "content": '{"analysis": "look", "commands": [{"keystrokes": "ls\\n"}]}'},
     [{"role": "user", "content": "New Terminal Output:\n$ ls\nREADME.md  src"}]),
    ({"role": "assistant", "content": "",
      "tool_calls": [{"name": "bash", "arguments": '{"cmd": "cat README.md"}'}]},
     [{"role": "tool", "content": "# Project\nrun `make`"}, {"role": "tool", "content": "exit 0"}]),
    ({"role": "assistant", "content": "Running make.",
      "tool_calls": [{"name": "bash", "arguments": '{"cmd": "make"}'}]},
     [{"role": "tool", "content": "gcc -o app main.c"}, {"role": "user", "content": "Continue."}]),
]  # fmt: skip


def test_round_trip_incremental_equals_full_render_over_several_turns(tok, tpl, session):
    messages = [
        {"role": "system", "content": "You are a terminal agent."},
        {"role": "user", "content": "Build."},
    ]
    prompt = session.start(messages)
    assert prompt == tok.encode(tpl.render(messages, add_generation_prompt=True), allow_special=True)
    for reply, appended in CONVERSATION:
        sampled = sample_canonically(tok, reply)
        next_prompt = session.next_prompt(prompt, sampled, appended)
        messages = messages + [reply] + appended
        # Independent computation: render the whole conversation and encode it from scratch.
        assert next_prompt == tok.encode(tpl.render(messages, add_generation_prompt=True), allow_special=True)
        assert next_prompt[: len(prompt) + len(sampled)] == prompt + sampled  # T_i is a prefix of p_{i+1}
        prompt = next_prompt


def test_non_canonical_sample_is_kept_not_reencoded(tok, session):
    p1 = session.start([{"role": "user", "content": "say hello"}])
    canonical = tok.encode("hello")
    split = [tok.encode("hel")[0], *tok.encode("lo")]  # a split the sampler may emit, never the canonical one
    assert tok.decode(split) == "hello" and split != canonical
    p2 = session.next_prompt(p1, split + [tok.im_end_id], [{"role": "user", "content": "again"}])
    assert p2[len(p1) : len(p1) + len(split) + 1] == split + [tok.im_end_id]


def test_glue_closes_a_sample_cut_at_max_tokens(tok, tpl, session):
    messages = [{"role": "user", "content": "write"}]
    p1 = session.start(messages)
    sampled = tok.encode("partial answer")  # finish_reason "length": no <|im_end|>
    p2 = session.next_prompt(p1, sampled, [{"role": "user", "content": "go on"}])
    start = len(p1) + len(sampled)
    assert p2[start : start + 2] == [tok.im_end_id, tok.encode("\n")[0]]
    full = messages + [
        {"role": "assistant", "content": "partial answer"},
        {"role": "user", "content": "go on"},
    ]
    assert p2 == tok.encode(tpl.render(full, add_generation_prompt=True), allow_special=True)


def test_glue_after_endoftext_still_closes_the_turn(tok, session):
    assert session.glue([5, tok.endoftext_id]) == [tok.im_end_id, *tok.encode("\n")]
    assert session.glue([5, tok.im_end_id]) == tok.encode("\n")
    assert session.glue([]) == [tok.im_end_id, *tok.encode("\n")]


def test_thinking_session_opens_think_blocks(tok, tpl):
    s = TitoSession(tok, tpl, thinking=True)
    assert tok.decode(s.start([{"role": "user", "content": "q"}])).endswith(
        "<|im_start|>assistant\n<think>\n"
    )


def test_non_append_only_template_is_refused(tok):
    # A template that prunes earlier assistant turns once a new user turn follows breaks the prefix.
    pruning = ChatTemplate(
        "{%- for m in messages %}{%- if not (m.role == 'assistant' and not loop.last) %}"
        "{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )
    s = TitoSession(tok, pruning)
    with pytest.raises(TemplateError, match="append-only"):
        s.next_prompt([1], [2], [{"role": "user", "content": "x"}])


def _normalized_boundary_turns(end: int):
    """Two turns whose boundary is not a strict prefix: p_2 keeps a_1 but for its last 2 ids (u = 2), the
    second of them the turn close ``end`` that p_2 holds after the kept id."""
    from t1_tito import Turn

    common = {"policy_version": 0, "finish_reason": "stop"}
    first = Turn(
        prompt_ids=[11, 12, 13], output_ids=[14, 15, end], output_logprobs=[-0.1, -0.2, -0.3], **common
    )
    second = Turn(prompt_ids=[11, 12, 13, 14, end, 20, 21], output_ids=[22], output_logprobs=[-0.3], **common)
    return [first, second]


@pytest.mark.parametrize(("repair", "chunks"), [("strict", 2), ("normalized", 1)])
def test_the_session_stitches_with_its_own_repair_setting(tok, tpl, repair, chunks):
    bounds = {} if repair == "strict" else {"normalize_max_s": 96, "normalize_max_u": 16}
    session = TitoSession(tok, tpl, repair=repair, **bounds)
    result = session.stitch_turns(
        _normalized_boundary_turns(tok.im_end_id), reward=0.5, task_id="t", family="f", trial_id="x"
    )
    assert len(result.samples) == chunks
    assert result.audit.drifted_loss_tokens == 0
    expected = {"strict": 0, "normalized": 1}[repair]
    assert result.audit.case_counts["normalized"] == expected
