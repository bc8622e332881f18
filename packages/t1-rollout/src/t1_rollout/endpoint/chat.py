r"""OpenAI chat-completions shapes: tools into the prompt, the model's text into a message, SSE chunks.

The model (Qwen3.5-style) calls a tool by writing ``<tool_call>\n{"name": ..., "arguments": {...}}\n
</tool_call>`` after its content, the shape `t1_tito.ChatTemplate` renders an assistant turn's tool calls in;
`parse_reply` reads that back into an OpenAI ``message`` with ``tool_calls``. Tool definitions have no place
in the template, so `with_tools` appends them to the system message as JSON signatures. None of this text
decides what is trained on: the trial's sample is stitched from the ids the engine sampled.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from t1_tito import TemplateError

TOOLS_HEADER = (
    "# Tools\n\nYou can call the functions described below; each signature is a JSON object inside "
    "<tools></tools>:\n<tools>\n"
)
TOOLS_FOOTER = (
    "\n</tools>\n\nTo call one, answer with a JSON object holding its name and arguments between "
    '<tool_call></tool_call> tags:\n<tool_call>\n{"name": <function name>, "arguments": <JSON object>}\n'
    "</tool_call>"
)
_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def plain_messages(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """The messages as the template takes them: content as one string, ``developer`` as ``system``.

    OpenAI's content may be a list of parts; text parts (``{"type": "text", "text": ...}``) are joined in
    order. OpenAI's newer ``developer`` role is its system role.

    Raises:
        TemplateError: a message that is not an object, or a content part that is not text (an image),
            naming the message and the part.
    """
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise TemplateError(f"messages[{i}]: must be an object, got {type(m).__name__}")
        msg = dict(m)
        if msg.get("role") == "developer":
            msg["role"] = "system"
        content = msg.get("content")
        if isinstance(content, list):
            texts = []
            for j, part in enumerate(content):
                if not (isinstance(part, Mapping) and part.get("type") in ("text", "input_text")):
                    kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                    raise TemplateError(
                        f"messages[{i}].content[{j}]: only text parts are served, got {kind!r}"
                    )
                texts.append(str(part.get("text", "")))
            msg["content"] = "".join(texts)
        out.append(msg)
    return out


def with_tools(messages: Sequence[Any], tools: Sequence[Mapping[str, Any]] | None) -> list[dict]:
    """The messages (`plain_messages`) with the tool signatures appended to the system message.

    Args:
        messages: The request's ``messages``.
        tools: The request's ``tools`` (``[{"type": "function", "function": {...}}]``) or None; a system
            message is added first when there is none.

    Returns:
        New message dicts.

    Raises:
        TemplateError: what `plain_messages` raises, a tool that is not a mapping, or a system message whose
            content is not a string.
    """
    out = plain_messages(messages)
    if not tools:
        return out
    lines = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, Mapping):
            raise TemplateError(f"tools[{i}]: must be an object, got {type(tool).__name__}")
        lines.append(json.dumps(tool.get("function", tool), ensure_ascii=False, sort_keys=True))
    block = TOOLS_HEADER + "\n".join(lines) + TOOLS_FOOTER
    if out and out[0].get("role") == "system":
        content = out[0].get("content")
        if not isinstance(content, str):
            raise TemplateError("messages[0]: a system message's content must be a string to carry the tools")
        out[0]["content"] = f"{content}\n\n{block}" if content else block
    else:
        out.insert(0, {"role": "system", "content": block})
    return out


@dataclass(frozen=True)
class Reply:
    """The model's answer as the API returns it.

    Attributes:
        content: The text before the first tool call (None when empty and there are tool calls).
        reasoning: The think block's text when the prompt opened one (``reasoning_content``), else "".
        tool_calls: OpenAI tool calls, ``{"id", "type": "function", "function": {"name", "arguments"}}``
            with ``arguments`` a JSON string.
    """

    content: str | None
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)

    def message(self) -> dict[str, Any]:
        """The ``choices[0].message`` object."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning:
            msg["reasoning_content"] = self.reasoning
        if self.tool_calls:
            msg["tool_calls"] = self.tool_calls
        return msg


def parse_reply(text: str, *, thinking: bool, call_prefix: str) -> Reply:
    """Split the model's decoded answer into content, reasoning and tool calls.

    Args:
        text: The sampled ids decoded, stop ids left out.
        thinking: The generation prompt opened a think block: the text up to ``</think>`` is reasoning.
        call_prefix: Prefix of the tool-call ids (``call_<prefix>_<n>``), unique per model call.

    Returns:
        The `Reply`. A ``<tool_call>`` block that is not a JSON object with a string ``name`` stays in the
        content as text (the harness sees what the model wrote), as does text after the first tool call.
    """
    reasoning = ""
    if thinking and "</think>" in text:
        reasoning, _, text = text.partition("</think>")
        reasoning, text = reasoning.strip("\n"), text.lstrip("\n")
    calls: list[dict[str, Any]] = []
    first = None
    for match in _CALL_RE.finditer(text):
        try:
            obj = json.loads(match.group(1))
        except json.JSONDecodeError:
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            continue
        args = obj.get("arguments", {})
        calls.append(
            {
                "id": f"call_{call_prefix}_{len(calls)}",
                "type": "function",
                "function": {
                    "name": obj["name"],
                    "arguments": args if isinstance(args, str) else json.dumps(args, ensure_ascii=False),
                },
            }
        )
        first = match.start() if first is None else first
    if not calls:
        return Reply(content=text, reasoning=reasoning)
    content = text[:first].removesuffix("\n")  # the template puts one \n between content and a call
    return Reply(content=content or None, reasoning=reasoning, tool_calls=calls)


def finish_reason(engine_reason: str, reply: Reply) -> str:
    """OpenAI's ``finish_reason``: ``tool_calls`` when the model called a tool, ``length`` at the cap."""
    if engine_reason == "length":
        return "length"
    return "tool_calls" if reply.tool_calls else "stop"


def completion(
    *, call_id: str, model: str, reply: Reply, reason: str, prompt_tokens: int, completion_tokens: int
) -> dict[str, Any]:
    """A ``chat.completion`` object (non-streaming answer)."""
    return {
        "id": call_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": reply.message(), "finish_reason": reason, "logprobs": None}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def stream_events(body: Mapping[str, Any]) -> Iterator[bytes]:
    """The same answer as ``chat.completion.chunk`` server-sent events, then ``data: [DONE]``.

    The whole answer is generated before the first event: the events carry it in three deltas (role and
    content, the tool calls, the finish reason with the usage), the shape streaming clients assemble.
    """
    choice = body["choices"][0]
    message = choice["message"]
    base = {
        "id": body["id"],
        "object": "chat.completion.chunk",
        "created": body["created"],
        "model": body["model"],
    }

    def event(delta: dict[str, Any], reason: str | None, **extra: Any) -> bytes:
        chunk = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": reason}], **extra}
        return f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n".encode()

    first: dict[str, Any] = {"role": "assistant", "content": message["content"] or ""}
    if message.get("reasoning_content"):
        first["reasoning_content"] = message["reasoning_content"]
    yield event(first, None)
    calls = message.get("tool_calls") or []
    if calls:
        yield event({"tool_calls": [{"index": i, **c} for i, c in enumerate(calls)]}, None)
    yield event({}, choice["finish_reason"], usage=body["usage"])
    yield b"data: [DONE]\n\n"


def error_body(message: str, *, kind: str, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error object: ``{"error": {"message", "type", "code", "param"}}``."""
    return {"error": {"message": message, "type": kind, "code": code, "param": None}}
