"""What stands behind every chat-completions call of one trial: prompt ids, sampled ids, log-probs, routing.

`TrialCapture.complete` answers one request of an external harness (T1 §4.1, §4.2):

1. The messages (tools appended to the system message, `t1_rollout.endpoint.chat.with_tools`) are compared
   with the history the previous call left: that call's messages and the assistant message the endpoint
   returned, both as `t1_tito.normalize_messages` gives them. When the harness sent that history back
   unchanged and only appended messages (tool results, a user turn), the prompt is built token-in-token-out
   (`TitoSession.next_prompt`: the previous prompt ids, the sampled ids, the glue, then the new messages
   encoded): T_i is a bit-exact prefix of p_(i+1) by construction and the engine conditions on the sampled
   ids themselves, not on a re-encoding of their text.
2. Otherwise (the harness edited, pruned or re-serialized an earlier turn, compacted its context, or changed
   the tools) the prompt is the full render of the messages it sent, which is what the model is then
   conditioned on. The boundary is left to `t1_tito.stitch`, which classifies it under the recipe's repair
   (strict, normalized, retokenized, else a split into a new chunk) and counts it in the TITO audit: a
   re-serialized tool call is repaired or split, never silently mismatched.
3. The routing request starts where the previous turn's rows end when T_i is a strict prefix of the prompt,
   else at 0 (`t1_tito.routing_start_len`), so R3 rows can be aligned whatever the boundary.
4. The engine samples; a `t1_tito.Turn` keeps the prompt ids, sampled ids, log-probs, routing rows and
   weight version in the trial's `Episode`, and the decoded text goes back as an OpenAI message.

The trial's sample is stitched from those turns (`TitoSession.stitch_turns`), never from the harness's text.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from t1_rollout.compaction import MIN_SAMPLE_TOKENS
from t1_rollout.endpoint.chat import Reply, completion, finish_reason, parse_reply, with_tools
from t1_rollout.engine.base import Engine, Generation, SamplingParams
from t1_rollout.harness import Episode, HarnessConfig
from t1_rollout.parking import Parking, ParkRequested
from t1_tito import PromptBuffer, TemplateError, TitoSession, Turn, normalize_messages, routing_start_len


class RequestError(ValueError):
    """A request the endpoint refuses (HTTP ``status``); the trial goes on unless ``ends`` is set.

    Attributes:
        status: the HTTP status (400 bad request, 409 episode over).
        code: OpenAI's error ``code`` (``invalid_messages``, ``context_length_exceeded``, ``max_turns``).
    """

    def __init__(self, message: str, *, status: int = 400, code: str = "invalid_request") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


@dataclass(frozen=True)
class CallRecord:
    """How one call's prompt was built (the TITO audit of the endpoint; ``t1_tito.stitch`` classifies).

    Attributes:
        turn: index of the call's `Turn` in the episode.
        prompt: ``tito`` (previous ids reused, the strict case by construction) or ``rendered`` (the
            harness's messages rendered in full: its history differed from the endpoint's).
        edited_message: index of the first message of the previous call's history the harness changed or
            dropped (``rendered`` calls after the first), else None.
        prompt_tokens: ``len(p_i)``.
        completion_tokens: ``len(a_i)``.
        weight_version: the version that sampled the call.
    """

    turn: int
    prompt: str
    edited_message: int | None
    prompt_tokens: int
    completion_tokens: int
    weight_version: int

    def to_json(self) -> dict[str, Any]:
        """The record as JSON-ready data."""
        return dict(self.__dict__)


class TrialCapture:
    """One trial's side of the endpoint: builds prompts, calls the engine, records `Turn`s in ``episode``.

    Calls are served one at a time in arrival order (a harness that sends two at once gets them in turn).

    Args:
        engine: the engine serving the behaviour policy.
        tito: the trial's TITO session (tokenizer, template, repair settings).
        sampling: the recipe's sampling; the request's own sampling fields are ignored (the behaviour policy
            is the recipe's), its ``max_tokens`` may only lower the per-turn cap.
        config: the episode's limits (``max_turns``, ``max_new_tokens``, ``context_tokens``).
        episode: filled in place: turns, the conversation text, finish and timings.
        model: the model name the endpoint answers with.
        parking: the trial's continuation handle: calls wait at the turn boundary while the trial is parked;
            None = never parks.
    """

    def __init__(
        self,
        *,
        engine: Engine,
        tito: TitoSession,
        sampling: SamplingParams,
        config: HarnessConfig,
        episode: Episode,
        model: str = "t1",
        parking: Parking | None = None,
    ) -> None:
        self.engine = engine
        self.tito = tito
        self.sampling = sampling
        self.config = config
        self.episode = episode
        self.model = model
        self.parking = parking
        self.calls: list[CallRecord] = []
        self.ended = asyncio.Event()  # set when the episode is over (a limit) or the engine failed
        self.error: BaseException | None = None  # an engine failure: the trial's, as infrastructure
        self._history: list[dict[str, Any]] | None = None  # normalized messages + the returned answer
        self._buffer: PromptBuffer | None = None
        self._lock = asyncio.Lock()

    def end(self, finish: str) -> None:
        """End the episode with ``finish`` (the first reason wins); further calls are refused."""
        if self.episode.finish == "incomplete":
            self.episode.finish = finish  # type: ignore[assignment]
        self.ended.set()

    async def complete(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Answer one chat-completions request body with a ``chat.completion`` object.

        Raises:
            RequestError: malformed messages or tools (400), ``n`` other than 1 (400), the episode is over
                (409, ``max_turns`` / ``context_length_exceeded``: the episode ends with that finish).
            Exception: what the engine raised (also kept in ``error``; the episode ends).
        """
        async with self._lock:
            if self.ended.is_set():
                raise RequestError(
                    f"the episode is over ({self.episode.finish})", status=409, code=self.episode.finish
                )
            messages, normalized, cap = self._read(body)
            prompt, source, edited = self._prompt(messages, normalized)
            if self.episode.agent_turns >= self.config.max_turns:
                self.end("max_turns")
                raise RequestError(
                    f"rollout.max_turns={self.config.max_turns} model calls reached",
                    status=409,
                    code="max_turns",
                )
            budget = self.config.context_tokens - len(prompt)
            if budget < MIN_SAMPLE_TOKENS:
                self.end("context_exhausted")
                raise RequestError(
                    f"the prompt is {len(prompt)} tokens of "
                    f"rollout.context_tokens={self.config.context_tokens}",
                    status=409,
                    code="context_length_exceeded",
                )
            gen = await self._generate(prompt, min(cap, budget))
            return self._answer(messages, prompt, gen, source, edited)

    def _read(self, body: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
        """The messages with tools, their normalized form, and the per-turn token cap of the request."""
        if not isinstance(body, Mapping):
            raise RequestError("the request body must be a JSON object")
        raw = body.get("messages")
        if not isinstance(raw, list) or not raw:
            raise RequestError("'messages' must be a non-empty list", code="invalid_messages")
        if body.get("n", 1) != 1:
            raise RequestError("only n=1 is served: one sample per call", code="invalid_n")
        tools = body.get("tools")
        if tools is not None and not isinstance(tools, list):
            raise RequestError("'tools' must be a list", code="invalid_tools")
        try:
            messages = with_tools(raw, tools)
            normalized = normalize_messages(messages)
        except TemplateError as exc:
            raise RequestError(str(exc), code="invalid_messages") from None
        cap = self.config.max_new_tokens
        for key in ("max_completion_tokens", "max_tokens"):
            asked = body.get(key)
            if isinstance(asked, int) and not isinstance(asked, bool) and asked > 0:
                cap = min(cap, asked)
        return messages, normalized, cap

    def _prompt(
        self, messages: list[dict[str, Any]], normalized: list[dict[str, Any]]
    ) -> tuple[np.ndarray, str, int | None]:
        """The prompt ids, how they were built (``tito`` | ``rendered``) and the first edited message."""
        history = self._history
        if history is not None and self._buffer is not None and self.episode.turns:
            n = len(history)
            appended = normalized[n:]
            if normalized[:n] == history and appended and all(m["role"] != "assistant" for m in appended):
                last = self.episode.turns[-1]
                try:
                    suffix = self.tito.next_prompt((), last.output_ids.tolist(), messages[n:])
                except TemplateError as exc:
                    raise RequestError(str(exc), code="invalid_messages") from None
                return self._buffer.extend(suffix), "tito", None
            edited = next(
                (i for i, (a, b) in enumerate(zip(history, normalized, strict=False)) if a != b),
                min(n, len(normalized)),
            )
        else:
            edited = None
        try:
            ids = self.tito.start(messages)
        except TemplateError as exc:
            raise RequestError(str(exc), code="invalid_messages") from None
        self._buffer = PromptBuffer(ids)
        return self._buffer.view(), "rendered", edited

    async def _generate(self, prompt: np.ndarray, max_new_tokens: int) -> Generation:
        """One engine call on ``prompt``, recorded as a `Turn`; waits at the boundary while parked."""
        start_len = 0
        if self.episode.turns:
            last = self.episode.turns[-1]
            start_len = routing_start_len(last.prompt_ids, last.output_ids, prompt)
        seed = self.sampling.seed
        sampling = SamplingParams(
            temperature=self.sampling.temperature,
            top_p=self.sampling.top_p,
            top_k=self.sampling.top_k,
            min_p=self.sampling.min_p,
            max_new_tokens=max_new_tokens,
            stop_token_ids=tuple(self.tito.tokenizer.eos_ids),
            seed=None if seed is None else seed + len(self.episode.turns),
        )
        while True:
            if self.parking is not None:
                await self.parking.boundary()
            t0 = time.monotonic()
            try:
                call = self.engine.generate(prompt.tolist(), sampling, routed_experts_start_len=start_len)
                gen = await (call if self.parking is None else self.parking.unless_asked(call))
            except ParkRequested:
                self.episode.resampled_turns += 1  # no turn mixes two weight versions
                continue
            except Exception as exc:
                self.error = exc
                self.ended.set()
                raise
            finally:
                self.episode.generate_time_s += time.monotonic() - t0
            break
        self.episode.turns.append(
            Turn(
                prompt_ids=prompt,
                output_ids=np.asarray(gen.output_ids, dtype=np.int64),
                output_logprobs=np.asarray(gen.output_logprobs, dtype=np.float64),
                routed_experts=gen.routed_experts,
                routed_experts_start_len=gen.routed_experts_start_len,
                policy_version=gen.weight_version,
                finish_reason=gen.finish_reason,
            )
        )
        return gen

    def _answer(
        self,
        messages: list[dict[str, Any]],
        prompt: np.ndarray,
        gen: Generation,
        source: str,
        edited: int | None,
    ) -> dict[str, Any]:
        """Decode the turn into the API's answer and remember the history the next call should send."""
        index = len(self.episode.turns) - 1
        eos = set(self.tito.tokenizer.eos_ids)
        text = self.tito.tokenizer.decode([i for i in gen.output_ids if i not in eos])
        reply: Reply = parse_reply(text, thinking=self.tito.thinking, call_prefix=f"{index}")
        message = reply.message()
        self.episode.messages = [*messages, message]
        self._history = normalize_messages(self.episode.messages)
        record = CallRecord(index, source, edited, len(prompt), len(gen.output_ids), gen.weight_version)
        self.calls.append(record)
        self.episode.endpoint_calls.append(record.to_json())
        return completion(
            call_id=f"chatcmpl-{index}",
            model=self.model,
            reply=reply,
            reason=finish_reason(gen.finish_reason, reply),
            prompt_tokens=len(prompt),
            completion_tokens=len(gen.output_ids),
        )
