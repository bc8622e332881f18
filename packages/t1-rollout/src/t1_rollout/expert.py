"""Expert trajectories for the supervised warm start (``t1 sft``): reference solutions as harness turns.

A reference solution (``solution/solve.sh``) becomes what a model would have to emit in the harness's own
action format (`t1_rollout.actions`): one JSON action typing the script's commands with ``task_complete``
set, then the confirmation Terminus asks for (`t1_rollout.harness.COMPLETE_CONFIRM`). `ScriptedEngine`
answers the harness with exactly those texts, so a trial run with it (`t1_rollout.trial.run_trial`) goes
through the real sandbox, shell, verifier and TITO stitching, and its messages are the expert conversation.

A conversation (system, user, then alternating assistant and user messages) is turned into training samples
by `samples_from_messages` with the run's `t1_tito.TitoSession`: the first prompt is ``tito.start`` of the
messages before the first assistant turn, every assistant message is encoded as the turn's output ids plus
``<|im_end|>``, and every following prompt is ``tito.next_prompt`` of the previous one, exactly as the harness
builds prompts in an RL trial; the loss mask is 1 on the assistant ids only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from t1_rollout.engine.base import Generation, SamplingParams
from t1_tito import Sample, TitoSession, Turn

__all__ = [
    "CONFIRM_ACTION",
    "ScriptedEngine",
    "expert_action",
    "expert_texts",
    "samples_from_messages",
    "solution_keystrokes",
]

CONFIRM_ACTION = json.dumps(
    {"analysis": "The task is done.", "plan": "Confirm completion.", "commands": [], "task_complete": True}
)
"""The second expert turn: the confirmation of ``task_complete`` the harness asks for."""

SOLUTION_DURATION_S = 5.0
"""Seconds the expert action waits for the solution's output (``duration``), within the harness's 60 s cap."""


def solution_keystrokes(script: str) -> str:
    """The lines of ``solve.sh`` an agent types into the persistent shell, ending with a newline.

    The shebang and a ``set -e``-style line are dropped: typed into an interactive shell, ``set -e`` would end
    the shell (and the episode) at the first failing command, where the script only exits.

    Args:
        script: the text of ``solution/solve.sh``.

    Raises:
        ValueError: the script has no command left.
    """
    lines = script.splitlines()
    if lines and lines[0].startswith("#!"):
        lines = lines[1:]
    lines = [ln for ln in lines if not ln.strip().startswith("set -")]
    body = "\n".join(lines).strip("\n")
    if not body.strip():
        raise ValueError("solve.sh has no command besides its shebang and set line")
    return body + "\n"


def expert_action(script: str) -> str:
    """The JSON action (`t1_rollout.actions.parse_action` reads it) that types ``script`` and says done."""
    return json.dumps(
        {
            "analysis": "The task is not done yet.",
            "plan": "Run the commands that solve it.",
            "commands": [{"keystrokes": solution_keystrokes(script), "duration": SOLUTION_DURATION_S}],
            "task_complete": True,
        }
    )


def expert_texts(script: str) -> list[str]:
    """The expert's assistant turns for a reference solution: the solving action, then the confirmation."""
    return [expert_action(script), CONFIRM_ACTION]


class ScriptedEngine:
    """An `Engine` that answers turn i with the encoding of ``texts[i]`` plus ``<|im_end|>``: the expert.

    It samples nothing: the log-prob reported for every id is 0.0 (the texts are given, not drawn), there is
    no routing record, and the weight version stays 0. One engine serves one episode; a call past the last
    text answers the confirmation action again, so a harness that asks once more still ends.

    Args:
        tito: the run's TITO session (its tokenizer encodes the texts).
        texts: the assistant turns, in order.
    """

    weight_version = 0

    def __init__(self, tito: TitoSession, texts: Sequence[str]) -> None:
        if not texts:
            raise ValueError("ScriptedEngine needs at least one assistant text")
        self.tito = tito
        self.texts = list(texts)
        self.calls = 0

    def encode(self, text: str) -> list[int]:
        """The output ids of an assistant text: its plain-text encoding, then ``<|im_end|>``."""
        return [*self.tito.tokenizer.encode(text), self.tito.tokenizer.im_end_id]

    async def generate(
        self,
        input_ids: list[int],
        sampling: SamplingParams,
        *,
        return_logprob: bool = True,
        return_routed_experts: bool = True,
        routed_experts_start_len: int = 0,
    ) -> Generation:
        """The next scripted text as a `Generation`, cut to ``sampling.max_new_tokens`` (``length``)."""
        t0 = time.monotonic()
        text = self.texts[min(self.calls, len(self.texts) - 1)]
        self.calls += 1
        ids = self.encode(text)
        finish = "stop"
        if len(ids) > sampling.max_new_tokens:
            ids, finish = ids[: sampling.max_new_tokens], "length"
        return Generation(
            output_ids=ids,
            output_logprobs=[0.0] * len(ids) if return_logprob else [],
            routed_experts=None,
            routed_experts_start_len=routed_experts_start_len,
            weight_version=self.weight_version,
            finish_reason=finish,
            prompt_tokens=len(input_ids),
            completion_tokens=len(ids),
            latency_s=time.monotonic() - t0,
        )

    def update_weights(self, state_dict: Mapping[str, Any], *, weight_version: int) -> None:
        """Refused: a scripted expert has no weights."""
        raise NotImplementedError("ScriptedEngine replays fixed texts; it has no weights to update")

    def pause(self) -> None:
        """Nothing to quiesce."""

    def resume(self) -> None:
        """Nothing to resume."""


def samples_from_messages(
    tito: TitoSession,
    messages: Sequence[Mapping[str, str]],
    *,
    task_id: str,
    trial_id: str,
    family: str = "",
    reward: float = 0.0,
) -> list[Sample]:
    """Stitch a recorded conversation into training samples, as the harness would have built its prompts.

    Args:
        tito: the run's TITO session (tokenizer, chat template, boundary repair).
        messages: ``[{"role", "content"}, ...]``: one or more context messages (system, user), then any number
            of assistant messages, each followed by the user messages it got back (observations). At least one
            assistant message; messages after the last assistant message are ignored (nothing reads them).
        task_id: the task the conversation solves (kept on every sample).
        trial_id: a unique name of the conversation.
        family: the task's category.
        reward: the scalar placed at the last loss position (unused by the SFT loss).

    Returns:
        The stitched samples (one, or more when a boundary split the stream): ``token_ids``, ``loss_mask``
        (1 on assistant ids only), ``rollout_logprobs`` 0 everywhere, no routing.

    Raises:
        ValueError: a message without a string ``role`` and ``content``, an unknown role, no assistant
            message, or an assistant message first (naming the index).
    """
    for i, m in enumerate(messages):
        if not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise ValueError(f"{trial_id}: message {i} needs string 'role' and 'content'")
        if m["role"] not in ("system", "user", "assistant"):
            raise ValueError(f"{trial_id}: message {i} has role {m['role']!r}; use system, user or assistant")
    first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), None)
    if first is None:
        raise ValueError(f"{trial_id}: no assistant message: nothing to learn from")
    if first == 0:
        raise ValueError(f"{trial_id}: message 0 is an assistant turn; the conversation needs a prompt first")
    im_end = tito.tokenizer.im_end_id
    prompt = tito.start(messages[:first])
    turns: list[Turn] = []
    i = first
    while i < len(messages):
        output = [*tito.tokenizer.encode(messages[i]["content"]), im_end]
        turns.append(
            Turn(
                prompt_ids=prompt,
                output_ids=output,
                output_logprobs=[0.0] * len(output),
                policy_version=0,
                finish_reason="stop",
            )
        )
        j = i + 1
        while j < len(messages) and messages[j]["role"] != "assistant":
            j += 1
        if j < len(messages):
            prompt = tito.next_prompt(prompt, output, [dict(m) for m in messages[i + 1 : j]])
        i = j
    result = tito.stitch_turns(turns, reward=reward, task_id=task_id, family=family, trial_id=trial_id)
    return list(result.samples)
