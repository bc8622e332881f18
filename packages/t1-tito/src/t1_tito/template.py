"""The chat template: messages to text for Qwen3.5-style turns (jinja2, package data ``templates/``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from typing import Any

from jinja2 import StrictUndefined
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROLES = ("system", "user", "assistant", "tool")


class TemplateError(ValueError):
    """Messages cannot be rendered (bad role, content type, tool call) or break the append-only rule."""


def _json(value: Any) -> str:
    # Plain JSON, non-ASCII kept: jinja's own tojson HTML-escapes '<', '>', '&', which would alter commands.
    return json.dumps(value, ensure_ascii=False)


def _identity(text: str) -> str:
    return text


def _normalize_call(call: Any, where: str, escape: Callable[[str], str]) -> dict[str, str]:
    if not isinstance(call, Mapping):
        raise TemplateError(f"{where}: a tool call must be a mapping, got {type(call).__name__}")
    fn = call.get("function", call)  # OpenAI shape {"type": "function", "function": {...}} or flat
    name, arguments = fn.get("name"), fn.get("arguments", {})
    if not isinstance(name, str) or not name:
        raise TemplateError(f"{where}: a tool call needs a non-empty string 'name'")
    if isinstance(arguments, str):
        try:
            json.loads(arguments)
        except json.JSONDecodeError as e:
            raise TemplateError(f"{where}: tool call arguments string is not JSON ({e.msg})") from None
        return {"name": escape(name), "arguments": escape(arguments)}
    return {"name": escape(name), "arguments": escape(_json(arguments))}


def normalize_messages(
    messages: Sequence[Mapping[str, Any]], *, escape: Callable[[str], str] | None = None
) -> list[dict[str, Any]]:
    """Validate messages and give each the keys the template reads.

    Args:
        messages: Dicts with ``role`` (system | user | assistant | tool) and ``content`` (str; None allowed
            for an assistant turn that only calls tools); assistant messages may carry ``reasoning_content``
            (str) and ``tool_calls`` (list of ``{"name", "arguments"}`` or OpenAI ``{"function": {...}}``;
            arguments a dict or a JSON string, rendered verbatim when a string).
        escape: Applied to every piece of message text (content, reasoning, tool-call name and arguments
            JSON) after validation, e.g. `Tokenizer.escape_content`; None leaves the text as is.

    Returns:
        New dicts with ``role``, ``content``, ``reasoning_content`` and ``tool_calls`` (arguments as JSON
        text), the text escaped when ``escape`` is given.

    Raises:
        TemplateError: unknown role, non-string content, malformed tool call; names the message index.
    """
    esc = escape or _identity
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, Mapping):
            raise TemplateError(f"{where}: must be a mapping, got {type(m).__name__}")
        role = m.get("role")
        if role not in ROLES:
            raise TemplateError(f"{where}: unknown role {role!r}; expected one of {ROLES}")
        content = m.get("content")
        if content is None and role == "assistant":
            content = ""
        if not isinstance(content, str):
            raise TemplateError(f"{where}: content must be a string, got {type(content).__name__}")
        reasoning = m.get("reasoning_content") or ""
        if not isinstance(reasoning, str):
            raise TemplateError(f"{where}: reasoning_content must be a string")
        calls = m.get("tool_calls") or []
        if calls and role != "assistant":
            raise TemplateError(f"{where}: only assistant messages may carry tool_calls (role {role!r})")
        tool_calls = [_normalize_call(c, f"{where}.tool_calls[{j}]", esc) for j, c in enumerate(calls)]
        out.append(
            {
                "role": role,
                "content": esc(content),
                "reasoning_content": esc(reasoning),
                "tool_calls": tool_calls,
            }
        )
    return out


class ChatTemplate:
    r"""Qwen3.5-style chat template (jinja2), append-only so that TITO's incremental rendering is exact.

    Turns are ``<|im_start|>{role}\n{content}<|im_end|>\n``. An assistant turn is ``<|im_start|>assistant\n
    <think>\n{reasoning}\n</think>\n\n{content}`` followed by its tool calls, each
    ``<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>`` (separated by ``\n``, and from non-empty
    content by ``\n``), then ``<|im_end|>\n``. Consecutive tool messages render inside one user turn as
    ``\n<tool_response>\n... \n</tool_response>`` each. The generation prompt is
    ``<|im_start|>assistant\n`` then ``<think>\n`` with thinking on, or the empty block
    ``<think>\n\n</think>\n\n`` with thinking off.

    Unlike the stock Qwen templates, reasoning is never pruned from earlier turns (T1 §4.1: pruning reasoning
    before the last user message is one of the three harness behaviours that break the TITO prefix).

    Only the template's own text is chat structure: message text (content, reasoning, tool-call JSON)
    reaches the template escaped when rendered for encoding (``escape=``), so its special-token strings stay
    plain text.

    Args:
        source: Template text; default the packaged template called ``name``.
        name: A packaged template (``templates/{name}.jinja``): ``"qwen3_5"`` (the default, append-only) or
            ``"qwen3_5_stock"``, which prunes the reasoning of assistant turns before the last user message as
            the stock Qwen3 templates do (for harnesses that re-render the history; TITO repairs or splits the
            boundaries it breaks).

    Raises:
        ValueError: ``name`` is not a packaged template.
    """

    PACKAGED = ("qwen3_5", "qwen3_5_stock")

    def __init__(self, source: str | None = None, *, name: str = "qwen3_5") -> None:
        if source is None:
            if name not in self.PACKAGED:
                raise ValueError(f"unknown packaged chat template {name!r}; known: {self.PACKAGED}")
            source = resources.files("t1_tito").joinpath(f"templates/{name}.jinja").read_text("utf-8")
        self.source = source
        env = ImmutableSandboxedEnvironment(undefined=StrictUndefined)
        env.filters["json"] = _json
        self._template = env.from_string(source)

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool,
        thinking: bool = False,
        escape: Callable[[str], str] | None = None,
    ) -> str:
        """Render messages to the prompt text.

        Args:
            messages: See `normalize_messages`.
            add_generation_prompt: Append the assistant turn opener the model continues from.
            thinking: With the generation prompt, open a think block for the model to fill (True) or close an
                empty one (False, the default).
            escape: Applied to all message text before rendering (see `normalize_messages`).

        Returns:
            The text. To get ids, render with ``escape=tokenizer.escape_content`` and encode with
            `Tokenizer.encode_chat`: the template's structure becomes control ids, message content stays plain
            text (a ``<|im_start|>`` typed in content is never a control token). Without ``escape`` the text
            is for display; encoding it with special tokens allowed would let content inject structure.

        Raises:
            TemplateError: invalid messages (see `normalize_messages`).
        """
        return self._template.render(
            messages=normalize_messages(messages, escape=escape),
            add_generation_prompt=add_generation_prompt,
            thinking=thinking,
        )
