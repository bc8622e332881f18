"""The Qwen3.5-style chat template: turns, tool calls, tool responses, generation prompt, append-only."""

import pytest

from t1_tito import TemplateError

EMPTY_THINK = "<think>\n\n</think>\n\n"


def test_turns_and_generation_prompt_without_thinking(tpl):
    text = tpl.render(
        [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "Fix the bug."}],
        add_generation_prompt=True,
    )
    assert text == (
        "<|im_start|>system\nYou are an agent.<|im_end|>\n"
        "<|im_start|>user\nFix the bug.<|im_end|>\n"
        "<|im_start|>assistant\n" + EMPTY_THINK
    )


def test_generation_prompt_with_thinking_opens_the_block(tpl):
    text = tpl.render([{"role": "user", "content": "q"}], add_generation_prompt=True, thinking=True)
    assert text.endswith("<|im_start|>assistant\n<think>\n")


def test_no_generation_prompt(tpl):
    assert tpl.render([{"role": "user", "content": "q"}], add_generation_prompt=False) == (
        "<|im_start|>user\nq<|im_end|>\n"
    )


def test_assistant_tool_calls_and_grouped_tool_responses(tpl):
    messages = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": "Listing.",
            "tool_calls": [
                {"name": "bash", "arguments": {"cmd": "ls <dir> && echo ü"}},
                {"type": "function", "function": {"name": "read", "arguments": '{"path": "a.txt"}'}},
            ],
        },
        {"role": "tool", "content": "a.txt"},
        {"role": "tool", "content": "hello"},
    ]
    assert tpl.render(messages, add_generation_prompt=False) == (
        "<|im_start|>user\ngo<|im_end|>\n"
        "<|im_start|>assistant\n" + EMPTY_THINK + "Listing.\n"
        '<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls <dir> && echo ü"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "read", "arguments": {"path": "a.txt"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\na.txt\n</tool_response>\n"
        "<tool_response>\nhello\n</tool_response><|im_end|>\n"
    )


def test_tool_call_without_content_has_no_leading_newline(tpl):
    text = tpl.render(
        [{"role": "assistant", "content": None, "tool_calls": [{"name": "f", "arguments": {}}]}],
        add_generation_prompt=False,
    )
    assert text == (
        "<|im_start|>assistant\n" + EMPTY_THINK + '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
        "<|im_end|>\n"
    )


def test_reasoning_is_kept_in_history(tpl):
    messages = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b", "reasoning_content": "thought"},
        {"role": "user", "content": "c"},
    ]
    assert "<think>\nthought\n</think>\n\nb<|im_end|>" in tpl.render(messages, add_generation_prompt=True)


def test_template_is_append_only_over_a_growing_conversation(tpl):
    conversation = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u1"},
        {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
        {"role": "tool", "content": "t1"},
        {"role": "assistant", "content": "", "tool_calls": [{"name": "x", "arguments": {"k": 1}}]},
        {"role": "tool", "content": "t2"},
        {"role": "tool", "content": "t3"},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "u2"},
    ]
    # Cut only after a closed turn (a tool run is one turn).
    cuts = [i for i in range(1, len(conversation)) if conversation[i]["role"] != "tool"] + [len(conversation)]
    renders = [tpl.render(conversation[:n], add_generation_prompt=False) for n in cuts]
    for shorter, longer in zip(renders, renders[1:], strict=False):
        assert longer.startswith(shorter)


@pytest.mark.parametrize(
    "message",
    [
        {"role": "robot", "content": "x"},
        {"role": "user", "content": ["parts"]},
        {"role": "user"},
        {"role": "user", "content": "x", "tool_calls": [{"name": "f"}]},
        {"role": "assistant", "content": "", "tool_calls": [{"arguments": {}}]},
        {"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": "{not json"}]},
    ],
)
def test_invalid_messages_raise_template_error_naming_the_index(tpl, message):
    with pytest.raises(TemplateError, match=r"messages\[1\]"):
        tpl.render([{"role": "user", "content": "ok"}, message], add_generation_prompt=True)


def test_template_ships_as_package_data(tpl):
    assert "<|im_start|>" in tpl.source and "tool_response" in tpl.source
