"""The agent harness: a Terminus-style loop that drives one persistent shell turn by turn.

Token ids are the source of truth (T1 §4.1, TITO strict case): the prompt of turn ``i + 1`` is built by
appending the sampled ids of turn ``i``, the template glue that closes the assistant turn, and the encoding
of the new observation only; earlier text is never decoded and re-encoded. The model answers with a JSON
action (:mod:`t1_rollout.actions`); commands run in one shell per trial, whose working directory and
environment persist across turns as in tmux. An unparsable answer costs a turn and earns a parse-error
observation. Terminus asks the model to confirm ``task_complete`` once: only a second consecutive
``task_complete`` ends the episode.

Context compaction (T1 §6, §9; `t1_rollout.compaction`): once the next prompt reaches
``compaction.threshold_tokens``, the agent writes a summary of its history in a turn of its own (a sampled
assistant turn, trained on like any other, closing the current chunk); the history is then replaced by the
system prompt, the task instruction and the summary, and the next turn opens a new TITO chunk
(``Turn.starts_chunk``). Summary turns do not count toward ``max_turns``, and no summary is asked for after
the last turn. A summary that fails (its token cap, too long to bring the context under the threshold,
empty, no room left) ends the episode with ``finish = "compaction_failed"``; an engine error during it
propagates like any engine error. Every attempt is kept in ``Episode.compactions``. Without compaction
(``HarnessConfig.compaction`` None), or when a turn would still overflow, the episode ends with
``finish = "context_exhausted"``.

Partial-rollout continuation (T1 §10; `t1_rollout.parking`): with a `Parking` handle, the episode parks at a
turn boundary when the scheduler asks, before a generation: a request in flight is aborted and its partial
turn discarded (``Episode.resampled_turns``), then sampled again in full after the resume, under the weights
the engine serves then. Earlier turns are never touched (their ids, log-probs, routing rows and version), and
the routing request of the re-sampled turn starts where the chunk's rows end, as before the park. Parked time
counts neither toward ``agent_deadline_s`` nor toward ``agent_time_s``.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from t1_rollout.actions import ActionParseError, parse_action, truncate_output
from t1_rollout.compaction import (
    MIN_SAMPLE_TOKENS,
    CompactionAttempt,
    CompactionCause,
    CompactionConfig,
    classify_summary,
    summary_request,
)
from t1_rollout.engine.base import Engine, Generation, SamplingParams
from t1_rollout.parking import Parking, ParkRequested
from t1_sandbox.base import ShellDied
from t1_spec import BuiltinHarnessSpec, Recipe, Registry, RolloutSpec
from t1_tito import PromptBuffer, TitoSession, Turn

HARNESSES = Registry(
    "rollout.harness.kind",
    {
        "builtin": "t1_rollout.harness:BuiltinHarness",
        "external": "t1_rollout.external:ExternalHarness",
    },
)
"""``rollout.harness.kind`` -> the harness running a trial's episode (``from_spec``, ``preflight``, ``run``):
T1's built-in loop (`BuiltinHarness`) or a command through the OpenAI-compatible endpoint
(`t1_rollout.external.ExternalHarness`)."""

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
    "incomplete",
    "task_complete",
    "max_turns",
    "agent_deadline",
    "context_exhausted",
    "compaction_failed",
    "shell_died",
    "harness_exit",
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
        compaction: when and how the agent compacts its context (`t1_rollout.compaction.CompactionConfig`);
            None = never (the episode ends with ``context_exhausted`` instead).
        agent: the harness that runs the episode (`HARNESSES`): `BuiltinHarness` by default.
    """

    max_turns: int
    agent_deadline_s: float
    max_new_tokens: int
    context_tokens: int
    observation_max_bytes: int = RolloutSpec.model_fields["observation_max_bytes"].default
    max_command_wait_s: float = 60.0
    compaction: CompactionConfig | None = None
    agent: Any = field(default_factory=lambda: BuiltinHarness())

    @classmethod
    def from_spec(cls, rollout: RolloutSpec) -> HarnessConfig:
        """The episode limits of the recipe's ``rollout`` section (``max_command_wait_s`` keeps its 60 s).

        Compaction is on, at ``rollout.compaction_threshold_tokens`` (`CompactionConfig.from_spec`); the
        harness is the one of ``rollout.harness.kind`` (`HARNESSES`).
        """
        return cls(
            max_turns=rollout.max_turns,
            agent_deadline_s=rollout.agent_deadline_s,
            max_new_tokens=rollout.max_new_tokens,
            context_tokens=rollout.context_tokens,
            observation_max_bytes=rollout.observation_max_bytes,
            compaction=CompactionConfig.from_spec(rollout),
            agent=HARNESSES.load(rollout.harness.kind).from_spec(rollout.harness),
        )


@dataclass(frozen=True)
class BuiltinHarness:
    """The ``builtin`` entry of `HARNESSES`: T1's own loop, `run_episode`, in the trial's persistent shell."""

    @classmethod
    def from_spec(cls, spec: BuiltinHarnessSpec) -> BuiltinHarness:
        """The built-in harness (its section has no setting but ``kind``)."""
        return cls()

    @classmethod
    def preflight(cls, recipe: Recipe) -> list[str]:
        """Nothing to check: the built-in harness runs wherever the trial's shell does."""
        return []

    async def run(
        self,
        *,
        task: Any,
        shell: Any,
        engine: Engine,
        tito: TitoSession,
        sampling: SamplingParams,
        config: HarnessConfig,
        episode: Episode,
        parking: Parking | None = None,
        **_: Any,
    ) -> Episode:
        """`run_episode` on the task's instruction (the trial's other arguments are not needed)."""
        return await run_episode(
            instruction=task.instruction,
            shell=shell,
            engine=engine,
            tito=tito,
            sampling=sampling,
            config=config,
            episode=episode,
            parking=parking,
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
        compactions: every compaction attempt, in order, succeeded or failed with its cause.
        summary_turns: indices in ``turns`` of the summary turns (sampled summaries, failed ones included).
        resampled_turns: generations aborted because the trial parked (partial-rollout continuation); their
            partial turns were discarded and sampled again after the resume, so they are in no ``turns``.
        endpoint_calls: with an external harness, how each call's prompt was built, one dict per turn
            (`t1_rollout.endpoint.CallRecord.to_json`: ``tito`` or ``rendered``, the first edited message);
            empty for the built-in harness.
    """

    turns: list[Turn] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    parse_failures: int = 0
    finish: Finish = "incomplete"
    agent_time_s: float = 0.0
    generate_time_s: float = 0.0
    compactions: list[CompactionAttempt] = field(default_factory=list)
    summary_turns: list[int] = field(default_factory=list)
    resampled_turns: int = 0
    endpoint_calls: list[dict[str, Any]] = field(default_factory=list)

    @property
    def agent_turns(self) -> int:
        """Turns that count toward ``max_turns``: every turn but the summary turns."""
        return len(self.turns) - len(self.summary_turns)


def initial_messages(instruction: str, terminal_state: str) -> list[dict[str, str]]:
    """The first two messages of an episode: the system prompt, then the task with the terminal screen."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {
            "role": "user",
            "content": f"Task:\n{instruction.strip()}\n\nCurrent terminal state:\n{terminal_state}",
        },
    ]


def compacted_messages(instruction: str, summary: str) -> list[dict[str, str]]:
    """The history after a compaction: the system prompt, then the task followed by the agent's summary."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {
            "role": "user",
            "content": (
                f"Task:\n{instruction.strip()}\n\nYour context was compacted. Your summary of the work so "
                f"far:\n{summary.strip()}\n\nContinue the task from there."
            ),
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
    parking: Parking | None = None,
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
        parking: the trial's continuation handle (`t1_rollout.parking.Parking`): the episode parks at a turn
            boundary when asked (see the module docstring); None = never parks.

    Returns:
        The :class:`Episode`. Engine and shell errors propagate (they are infrastructure failures, recorded
        by the caller with their cause, never scored as the agent's 0), except the shell exiting on its own
        (:class:`t1_sandbox.ShellDied`, or ``shell.alive`` turning false after a command): that is the
        agent's doing, the rest of the action is skipped and the episode ends with ``finish = "shell_died"``.
    """
    start = time.monotonic()
    episode = episode if episode is not None else Episode()
    terminal_state = await shell.send("", duration_s=0.2, max_wait_s=1.0)
    episode.messages = initial_messages(instruction, terminal_state)
    # prompts are views of one append-only buffer: each turn hands the stitcher arrays whose shared prefix
    # needs no comparison, so stitching costs linear time in tokens (T1 §4.1)
    buffer = PromptBuffer(tito.start(episode.messages))
    prompt_ids = buffer.view()
    rows_covered = 0
    pending_complete = False
    starts_chunk = False
    while True:
        if episode.agent_turns >= config.max_turns:
            episode.finish = "max_turns"
            break
        if _active_s(start, parking) >= config.agent_deadline_s:
            episode.finish = "agent_deadline"
            break
        budget = config.context_tokens - len(prompt_ids)
        if budget < MIN_SAMPLE_TOKENS:
            episode.finish = "context_exhausted"
            break
        gen = await _sample(
            engine,
            tito,
            prompt_ids,
            sampling,
            min(config.max_new_tokens, budget),
            rows_covered,
            episode,
            starts_chunk=starts_chunk,
            parking=parking,
        )
        starts_chunk = False
        rows_covered = _rows_covered(gen, rows_covered)
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
        next_ids = buffer.extend(tito.next_prompt((), gen.output_ids, [new_message]))
        compact = config.compaction is not None and len(next_ids) >= config.compaction.threshold_tokens
        if compact and episode.agent_turns < config.max_turns:  # no summary when no turn would read it
            compacted = await _compact(
                instruction,
                engine,
                tito,
                sampling,
                config,
                episode,
                prompt_ids=prompt_ids,
                output_ids=gen.output_ids,
                new_message=new_message,
                tokens_before=len(next_ids),
                rows_covered=rows_covered,
                parking=parking,
            )
            if compacted is None:
                episode.finish = "compaction_failed"
                break
            buffer = PromptBuffer(compacted)  # the compacted history starts a new chunk
            next_ids, rows_covered, starts_chunk = buffer.view(), 0, True
        prompt_ids = next_ids
    episode.agent_time_s = _active_s(start, parking)
    return episode


def _active_s(start: float, parking: Parking | None) -> float:
    """Seconds since ``start`` (``time.monotonic``) that the episode was not parked."""
    return time.monotonic() - start - (parking.parked_s if parking is not None else 0.0)


async def _sample(
    engine: Engine,
    tito: TitoSession,
    prompt_ids: np.ndarray,
    sampling: SamplingParams,
    max_new_tokens: int,
    rows_covered: int,
    episode: Episode,
    *,
    starts_chunk: bool = False,
    parking: Parking | None = None,
) -> Generation:
    """One engine call on ``prompt_ids``, recorded as a `Turn` of ``episode``; engine errors propagate.

    The routing request starts at ``rows_covered`` (the rows the current chunk already has), and the seed
    advances with every call of the episode, summary turns included. With ``parking``, the call is a turn
    boundary: the trial parks before it when asked, and a call aborted by a park request is made again, in
    full, after the resume (same prompt, same seed, same routing start; the new weights).
    """
    turn_sampling = SamplingParams(
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k,
        min_p=sampling.min_p,
        max_new_tokens=max_new_tokens,
        stop_token_ids=tuple(tito.tokenizer.eos_ids),
        seed=None if sampling.seed is None else sampling.seed + len(episode.turns),
    )
    while True:
        if parking is not None:
            await parking.boundary()
        t0 = time.monotonic()
        try:
            call = engine.generate(
                prompt_ids.tolist(), turn_sampling, routed_experts_start_len=rows_covered
            )  # engines take SGLang's list of ids
            gen = await (call if parking is None else parking.unless_asked(call))
        except ParkRequested:
            episode.resampled_turns += 1  # the partial turn is discarded: no turn mixes two weight versions
            continue
        finally:
            episode.generate_time_s += time.monotonic() - t0
        break
    episode.turns.append(
        Turn(
            prompt_ids=prompt_ids,  # a view of the episode's buffer, never written again
            output_ids=np.asarray(gen.output_ids, dtype=np.int64),
            output_logprobs=np.asarray(gen.output_logprobs, dtype=np.float64),
            routed_experts=gen.routed_experts,
            routed_experts_start_len=gen.routed_experts_start_len,
            policy_version=gen.weight_version,
            finish_reason=gen.finish_reason,
            starts_chunk=starts_chunk,
        )
    )
    return gen


def _rows_covered(gen: Generation, before: int) -> int:
    """Routing rows the chunk covers after ``gen`` (unchanged when the engine returned none)."""
    if gen.routed_experts is None:
        return before
    return gen.routed_experts_start_len + int(gen.routed_experts.shape[0])


async def _compact(
    instruction: str,
    engine: Engine,
    tito: TitoSession,
    sampling: SamplingParams,
    config: HarnessConfig,
    episode: Episode,
    *,
    prompt_ids: np.ndarray,
    output_ids: list[int],
    new_message: dict[str, str],
    tokens_before: int,
    rows_covered: int,
    parking: Parking | None = None,
) -> list[int] | None:
    """Have the agent summarise its history; the compacted prompt ids, or None when the attempt failed.

    The summary request extends the current chunk (``p_i || a_i || glue || observation || request``, the
    strict prefix case), so the summary turn is stitched into the chunk it closes and its sampled ids are
    trained on. On success the new prompt is ``tito.start(compacted_messages(...))`` and the next turn opens
    a new chunk. The attempt is appended to ``episode.compactions`` whatever its outcome.

    Raises:
        Exception: whatever the engine raised, after the attempt is recorded with cause ``engine_error``.
    """
    cfg = config.compaction
    assert cfg is not None  # the caller checked
    index = len(episode.turns)
    request = summary_request(tokens_before, config.context_tokens, cfg.summary_max_tokens)
    summary_prompt = np.concatenate(
        [prompt_ids, np.asarray(tito.next_prompt((), output_ids, [new_message, request]), dtype=np.int64)]
    )
    episode.messages.append(request)

    def failed(cause: CompactionCause, detail: str, sampled: int) -> None:
        episode.compactions.append(CompactionAttempt(index, tokens_before, None, sampled, cause, detail))

    room = config.context_tokens - len(summary_prompt)
    if room < MIN_SAMPLE_TOKENS:
        failed(
            "no_room",
            f"the summary request is {len(summary_prompt)} tokens of the {config.context_tokens}-token "
            f"context, leaving {room} (fewer than {MIN_SAMPLE_TOKENS}) for the summary",
            0,
        )
        return None
    cap = min(cfg.summary_max_tokens, room)
    try:
        gen = await _sample(
            engine, tito, summary_prompt, sampling, cap, rows_covered, episode, parking=parking
        )
    except Exception as exc:
        failed("engine_error", f"{type(exc).__name__}: {exc}", 0)
        raise
    episode.summary_turns.append(index)
    eos = tuple(tito.tokenizer.eos_ids)
    summary = tito.tokenizer.decode([i for i in gen.output_ids if i not in eos])
    episode.messages.append({"role": "assistant", "content": summary})
    sampled = len(gen.output_ids)
    cause, detail = classify_summary(
        gen.finish_reason, list(gen.output_ids), summary, max_new_tokens=cap, stop_ids=eos
    )
    if cause is not None:
        failed(cause, detail, sampled)
        return None
    messages = compacted_messages(instruction, summary)
    new_ids = tito.start(messages)
    if len(new_ids) >= cfg.threshold_tokens:
        failed(
            "too_long",
            f"the task and the summary take {len(new_ids)} tokens, not below the "
            f"{cfg.threshold_tokens}-token compaction threshold",
            sampled,
        )
        return None
    episode.messages.extend(messages)
    episode.compactions.append(CompactionAttempt(index, tokens_before, len(new_ids), sampled))
    return new_ids


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
