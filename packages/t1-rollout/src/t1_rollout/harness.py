"""The agent harness: a Terminus-style loop that drives one persistent shell turn by turn.

Token ids are the source of truth (T1 §4.1, TITO strict case): the prompt of turn ``i + 1`` is built by
appending the sampled ids of turn ``i``, the template glue that closes the assistant turn, and the encoding
of the new observation only; earlier text is never decoded and re-encoded. The model answers with a JSON
action (:mod:`t1_rollout.actions`); commands run in one shell per trial, whose working directory and
environment persist across turns as in tmux. An unparsable answer costs a turn and earns a parse-error
observation. Terminus asks the model to confirm ``task_complete`` once: only a second consecutive
``task_complete`` ends the episode.

Context compaction (T1 §9, proactive summarization) is not built yet: an episode whose context would overflow
``context_tokens`` ends with ``finish = "context_exhausted"``.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from t1_rollout.actions import ActionParseError, parse_action, truncate_output
from t1_rollout.engine.base import Engine, SamplingParams
from t1_rollout.sandbox.base import ShellDied
from t1_spec import RolloutSpec
from t1_tito import TitoSession, Turn

SYSTEM_PROMPT = """You are an AI agent working in a Linux terminal to complete a task.
Each turn, answer with exactly one JSON object and nothing else:
{"analysis": "<what the terminal shows>", "plan": "<what you will do>",
 "commands": [{"keystrokes": "<text to type, end with \\n to run>", "duration": <seconds to wait, <= 60>}],
 "task_complete": <true when the task is done>}
Commands run in one persistent bash shell; the working directory and variables persist between turns.
You will be shown the new terminal output after your commands."""

COMPLETE_CONFIRM = (
    'You marked the task complete. If you are sure, answer again with "task_complete": true; '
    "otherwise continue working."
)

Finish = Literal[
    "incomplete", "task_complete", "max_turns", "agent_deadline", "context_exhausted", "shell_died"
]


@dataclass(frozen=True)
class HarnessConfig:
    """Limits of one agent episode (from the recipe's ``rollout`` section, `from_spec`).

    Attributes:
        max_turns: assistant turns at most (parse-error and confirmation turns count).
        agent_deadline_s: wall-clock budget of the whole episode, seconds (T1 §7.4: 3600 in production).
        max_new_tokens: sampled tokens per turn at most.
        context_tokens: prompt + response budget in tokens; the episode ends before it would overflow.
        observation_max_bytes: terminal output kept per turn, head and tail, bytes; the default is the
            spec's (`t1_spec.RolloutSpec.observation_max_bytes`, Terminus: 10,000 bytes).
        max_command_wait_s: how long one command may keep the harness waiting, seconds (the system prompt's
            60 s cap on a command's ``duration``).
    """

    max_turns: int
    agent_deadline_s: float
    max_new_tokens: int
    context_tokens: int
    observation_max_bytes: int = RolloutSpec.model_fields["observation_max_bytes"].default
    max_command_wait_s: float = 60.0

    @classmethod
    def from_spec(cls, rollout: RolloutSpec) -> HarnessConfig:
        """The episode limits of the recipe's ``rollout`` section (``max_command_wait_s`` keeps its 60 s)."""
        return cls(
            max_turns=rollout.max_turns,
            agent_deadline_s=rollout.agent_deadline_s,
            max_new_tokens=rollout.max_new_tokens,
            context_tokens=rollout.context_tokens,
            observation_max_bytes=rollout.observation_max_bytes,
        )


@dataclass
class Episode:
    """What one agent episode produced.

    Attributes:
        turns: one :class:`t1_tito.Turn` per model call, with the token ids, log-probs and routing the
            engine returned.
        messages: the conversation as text, for the trajectory log (never used to rebuild token ids).
        parse_failures: turns whose answer was not a valid action.
        finish: why the episode ended (``incomplete`` while it runs, or when it was cut short by a failure or
            a cancellation).
        agent_time_s: wall time of the episode, seconds.
        generate_time_s: wall time spent waiting for the engine, seconds.
    """

    turns: list[Turn] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    parse_failures: int = 0
    finish: Finish = "incomplete"
    agent_time_s: float = 0.0
    generate_time_s: float = 0.0


def initial_messages(instruction: str, terminal_state: str) -> list[dict[str, str]]:
    """The first two messages of an episode: the system prompt, then the task with the terminal screen."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {
            "role": "user",
            "content": f"Task:\n{instruction.strip()}\n\nCurrent terminal state:\n{terminal_state}",
        },
    ]


async def run_episode(
    *,
    instruction: str,
    shell: Any,
    engine: Engine,
    tito: TitoSession,
    sampling: SamplingParams,
    config: HarnessConfig,
    episode: Episode | None = None,
) -> Episode:
    """Run the agent loop until the task is declared complete or a limit is reached.

    Args:
        instruction: the task's ``instruction.md``.
        shell: the trial's persistent shell
            (``await shell.send(keystrokes, duration_s=..., max_wait_s=...) -> str``).
        engine: the inference engine; every call returns ids, log-probs and routed experts (SGLang's shapes).
        tito: the token-in-token-out session that builds each prompt from the previous one.
        sampling: sampling parameters; ``max_new_tokens`` is lowered per turn to respect ``context_tokens``.
        config: the episode's limits.
        episode: filled in place when given, so a caller that cancels the loop (a hard deadline) keeps
            the turns sampled so far.

    Returns:
        The :class:`Episode`. Engine and shell errors propagate (they are infrastructure failures, recorded
        by the caller with their cause, never scored as the agent's 0), except the shell exiting on its own
        (:class:`t1_rollout.sandbox.ShellDied`, or ``shell.alive`` turning false after a command): that is the
        agent's doing, the rest of the action is skipped and the episode ends with ``finish = "shell_died"``.
    """
    start = time.monotonic()
    episode = episode if episode is not None else Episode()
    terminal_state = await shell.send("", duration_s=0.2, max_wait_s=1.0)
    episode.messages = initial_messages(instruction, terminal_state)
    prompt_ids = tito.start(episode.messages)
    rows_covered = 0
    pending_complete = False
    while True:
        if len(episode.turns) >= config.max_turns:
            episode.finish = "max_turns"
            break
        if time.monotonic() - start >= config.agent_deadline_s:
            episode.finish = "agent_deadline"
            break
        budget = config.context_tokens - len(prompt_ids)
        if budget < 8:
            episode.finish = "context_exhausted"
            break
        turn_sampling = SamplingParams(
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k,
            max_new_tokens=min(config.max_new_tokens, budget),
            stop_token_ids=tuple(tito.tokenizer.eos_ids),
            seed=None if sampling.seed is None else sampling.seed + len(episode.turns),
        )
        t0 = time.monotonic()
        gen = await engine.generate(prompt_ids, turn_sampling, routed_experts_start_len=rows_covered)
        episode.generate_time_s += time.monotonic() - t0
        episode.turns.append(
            Turn(
                prompt_ids=list(prompt_ids),
                output_ids=list(gen.output_ids),
                output_logprobs=list(gen.output_logprobs),
                routed_experts=gen.routed_experts,
                routed_experts_start_len=gen.routed_experts_start_len,
                policy_version=gen.weight_version,
                finish_reason=gen.finish_reason,
            )
        )
        if gen.routed_experts is not None:
            rows_covered = gen.routed_experts_start_len + int(gen.routed_experts.shape[0])
        text = tito.tokenizer.decode([i for i in gen.output_ids if i not in tito.tokenizer.eos_ids])
        episode.messages.append({"role": "assistant", "content": text})

        observation, status, died = await _act(text, shell, config, episode, pending_complete)
        if status == "done":
            episode.finish = "task_complete"
            break
        pending_complete = status == "confirm"
        if shell_dead := died or not await _shell_alive(shell) and await _ended_by_agent(shell):
            observation = observation + "\n[the shell exited; the episode ends]"
        new_message = {"role": "user", "content": observation}
        episode.messages.append(new_message)
        if shell_dead:
            episode.finish = "shell_died"
            break
        prompt_ids = tito.next_prompt(prompt_ids, gen.output_ids, [new_message])
    episode.agent_time_s = time.monotonic() - start
    return episode


async def _act(
    text: str, shell: Any, config: HarnessConfig, episode: Episode, pending_complete: bool
) -> tuple[str, Literal["continue", "confirm", "done"], bool]:
    """Execute one answer: ``(next observation, continue | confirm | done, the shell died)``.

    When the agent's own keystrokes end the shell (``exit``, ``set -e`` and a failing command, Ctrl-D at the
    prompt), the rest of the action is not sent: the shell's death is the agent's outcome (the caller ends the
    episode with ``finish = "shell_died"`` and the task is still graded), not an infrastructure failure.
    Other shell errors propagate.
    """
    try:
        action = parse_action(text)
    except ActionParseError as exc:
        episode.parse_failures += 1
        return f"Previous response had parsing errors: {exc}.", "continue", False
    outputs: list[str] = []
    died = False
    for i, command in enumerate(action.commands):
        try:
            out = await shell.send(
                command.keystrokes, duration_s=command.duration_s, max_wait_s=config.max_command_wait_s
            )
        except ShellDied:  # it exited between the previous liveness check and this send
            died = True
        else:
            outputs.append(out)
            died = not await _shell_alive(shell) and await _ended_by_agent(shell)
        if died:
            left = len(action.commands) - i - 1
            if left:
                outputs.append(f"\n[the shell exited; the {left} remaining command(s) were not run]")
            break
    if action.task_complete and not died:
        if pending_complete:
            return "", "done", False
        return COMPLETE_CONFIRM, "confirm", False
    body = "".join(outputs) if outputs else "(no commands were run)"
    observation = "New terminal output:\n" + truncate_output(body, config.observation_max_bytes)
    return observation, "continue", died


async def _ended_by_agent(shell: Any) -> bool:
    """For a shell found dead: True when it ended on its own; raises when the infrastructure killed it.

    A send to a dead shell raises (the ``Shell.send`` contract): :class:`ShellDied` means it exited on its own
    (the agent's doing); any other error is an infrastructure failure and propagates to the trial.
    """
    with contextlib.suppress(ShellDied):  # a backend that does not raise: the probe said dead, no more
        await shell.send("", duration_s=0.0, max_wait_s=0.0)
    return True


async def _shell_alive(shell: Any) -> bool:
    """Whether the persistent shell still runs (shells without the probe are assumed alive)."""
    probe = getattr(shell, "alive", None)
    if probe is None:
        return True
    result = probe() if callable(probe) else probe
    if hasattr(result, "__await__"):
        result = await result
    return bool(result)
