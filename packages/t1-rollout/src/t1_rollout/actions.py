r"""Terminus-style agent actions: the JSON the model answers with, parsed and checked.

Each assistant turn is one JSON object::

    {"analysis": "...", "plan": "...",
     "commands": [{"keystrokes": "ls -la\\n", "duration": 1.0}, ...],
     "task_complete": false}

``keystrokes`` are typed verbatim into the trial's persistent shell (a trailing newline executes them);
``duration`` is how long to wait for output, in seconds, capped at :data:`MAX_COMMAND_DURATION_S` as
Terminus-2 does. Text around the object is tolerated; anything else is a parse error that costs the turn
(T1 §6 evaluation harness, Terminus-2).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

MAX_COMMAND_DURATION_S = 60.0
DEFAULT_COMMAND_DURATION_S = 1.0


class ActionParseError(ValueError):
    """The model's answer is not a valid action; the message is shown to the model as its next observation."""


@dataclass(frozen=True)
class Command:
    """One command of an action.

    Attributes:
        keystrokes: text typed into the shell, verbatim.
        duration_s: seconds to wait for output before the next command, in (0, 60].
    """

    keystrokes: str
    duration_s: float


@dataclass(frozen=True)
class Action:
    """A parsed assistant turn.

    Attributes:
        analysis: the model's reading of the current state.
        plan: what it intends to do next.
        commands: commands to run in order.
        task_complete: the model declares the task done (Terminus asks it to confirm once).
    """

    analysis: str
    plan: str
    commands: tuple[Command, ...]
    task_complete: bool


def _extract_json_object(text: str) -> str:
    """Return the outermost ``{...}`` span of ``text``.

    Raises:
        ActionParseError: when no balanced object is found.
    """
    start = text.find("{")
    if start < 0:
        raise ActionParseError("no JSON object found in the response; answer with one JSON object")
    depth = 0
    in_string = False
    escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
    raise ActionParseError("the JSON object is not closed; answer with one complete JSON object")


def parse_action(text: str) -> Action:
    """Parse a model answer into an :class:`Action`.

    Args:
        text: the decoded assistant turn (special tokens removed).

    Returns:
        The action, with durations clamped to ``(0, 60]`` seconds.

    Raises:
        ActionParseError: the answer holds no JSON object, the JSON is invalid, or a field has the wrong
            type. The message names the field so the model can correct itself.
    """
    blob = _extract_json_object(text)
    try:
        data = json.loads(blob)
    except json.JSONDecodeError as exc:
        raise ActionParseError(f"invalid JSON: {exc.msg} at position {exc.pos}") from None
    if not isinstance(data, dict):
        raise ActionParseError("the answer must be a JSON object")
    commands_raw = data.get("commands", [])
    if not isinstance(commands_raw, list):
        raise ActionParseError("field 'commands' must be a list of {keystrokes, duration} objects")
    commands: list[Command] = []
    for i, item in enumerate(commands_raw):
        if not isinstance(item, dict) or not isinstance(item.get("keystrokes"), str):
            raise ActionParseError(f"commands[{i}] must be an object with a string 'keystrokes'")
        duration = item.get("duration", DEFAULT_COMMAND_DURATION_S)
        if isinstance(duration, bool) or not isinstance(duration, int | float):
            raise ActionParseError(f"commands[{i}].duration must be a number of seconds")
        duration = min(max(float(duration), 0.1), MAX_COMMAND_DURATION_S)
        commands.append(Command(keystrokes=item["keystrokes"], duration_s=duration))
    task_complete = data.get("task_complete", False)
    if not isinstance(task_complete, bool):
        raise ActionParseError("field 'task_complete' must be true or false")
    analysis = data.get("analysis", "")
    plan = data.get("plan", "")
    if not isinstance(analysis, str) or not isinstance(plan, str):
        raise ActionParseError("fields 'analysis' and 'plan' must be strings")
    return Action(analysis=analysis, plan=plan, commands=tuple(commands), task_complete=task_complete)


def truncate_output(text: str, max_bytes: int) -> str:
    """Keep the head and tail of a terminal observation (Terminus keeps 10,000 bytes: first and last halves).

    Args:
        text: the observation.
        max_bytes: the budget in UTF-8 bytes; at least 64.

    Returns:
        ``text`` unchanged when it fits, else its first and last ``max_bytes // 2`` bytes around a marker that
        says how many bytes were left out.

    Raises:
        ValueError: when ``max_bytes`` is below 64.
    """
    if max_bytes < 64:
        raise ValueError(f"max_bytes must be at least 64, got {max_bytes}")
    raw = text.encode("utf-8")
    if len(raw) <= max_bytes:
        return text
    half = max_bytes // 2
    head = raw[:half].decode("utf-8", errors="ignore")
    tail = raw[-half:].decode("utf-8", errors="ignore")
    omitted = len(raw) - 2 * half
    return f"{head}\n[... output limited to {max_bytes} bytes; {omitted} interior bytes omitted ...]\n{tail}"
