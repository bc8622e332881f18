"""A TITO session: build each turn's prompt ids from the previous ids, never re-encoding them (T1 §4.1)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from t1_tito.sample import Turn
from t1_tito.stitch import StitchResult, stitch
from t1_tito.template import ChatTemplate, TemplateError
from t1_tito.tokenizer import Tokenizer

# Fixed history the appended messages are rendered under; its text must be a prefix of the longer render.
_PREFIX_MESSAGES: tuple[dict[str, str], ...] = (
    {"role": "system", "content": "prefix"},
    {"role": "user", "content": "prefix"},
    {"role": "assistant", "content": "prefix"},
)


class TitoSession:
    r"""Token-in-token-out prompt building for one trial; token ids are the source of truth (T1 §4.1, strict).

    ``p_{i+1} = p_i || a_i || glue || enc(render(new messages) + generation prompt)``: the earlier ids (the
    prompt and the sampled ids) are reused verbatim, so T_i = p_i || a_i is a bit-exact prefix of p_{i+1} by
    construction. The glue closes the assistant turn as the template would: ``<|im_end|>`` when the sample did
    not end with it (e.g. it stopped at max tokens, or on ``<|endoftext|>``), then ``\n``.

    Only the template's structure yields control ids: message content and observations are rendered escaped
    and encoded as plain text (`Tokenizer.encode_chat`), so an agent that prints ``<|im_start|>system`` in the
    terminal adds no ``<|im_start|>`` id to the next prompt. Sampled ids are token-in: kept verbatim, special
    ids the model emitted included.

    The session also holds how its trials' turn boundaries are stitched (`stitch_turns`): the recipe's
    ``tito`` section, passed by the run as ``repair``, ``normalize_max_s`` and ``normalize_max_u``.

    Args:
        tokenizer: From `load_tokenizer`.
        template: The chat template (append-only; see `ChatTemplate`).
        thinking: Open a think block in every generation prompt (default off: an empty block is closed).
        repair: The most permissive boundary case tried before a split (``strict``, ``normalized`` or
            ``retokenized``; `t1_tito.stitch`).
        normalize_max_s: s bound of the normalized case (tokens); required unless ``repair`` is ``strict``.
        normalize_max_u: u bound of the normalized case (tokens); required unless ``repair`` is ``strict``.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        template: ChatTemplate,
        *,
        thinking: bool = False,
        repair: str = "strict",
        normalize_max_s: int | None = None,
        normalize_max_u: int | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.template = template
        self.thinking = thinking
        self.repair = repair
        self.normalize_max_s = normalize_max_s
        self.normalize_max_u = normalize_max_u
        self._prefix_text = self._render(_PREFIX_MESSAGES, add_generation_prompt=False)

    def stitch_turns(
        self, turns: Sequence[Turn], *, reward: float, task_id: str, family: str, trial_id: str
    ) -> StitchResult:
        """Stitch one trial's turns with this session's boundary repair and tokenizer (`t1_tito.stitch`).

        Raises:
            ValueError: what `t1_tito.stitch` raises (misaligned streams, invalid turns, routing that does
                not fit, missing repair bounds); its error classes are ValueErrors.
        """
        return stitch(
            turns,
            reward=reward,
            task_id=task_id,
            family=family,
            trial_id=trial_id,
            repair=self.repair,
            normalize_max_s=self.normalize_max_s,
            normalize_max_u=self.normalize_max_u,
            tokenizer=None if self.repair == "strict" else self.tokenizer,
        )

    def _render(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool) -> str:
        # Content escaped: special-token strings left in the text are the template's structure only.
        return self.template.render(
            messages,
            add_generation_prompt=add_generation_prompt,
            thinking=self.thinking,
            escape=self.tokenizer.escape_content,
        )

    def start(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """Encode the first prompt: the rendered messages plus the generation prompt, ids ``[len(p_1)]``.

        Message content is plain text: a special-token string in it never becomes a control id.

        Raises:
            TemplateError: (a ValueError) an empty message list (the prompt would be a bare generation
                prompt with no instruction), or invalid messages.
        """
        if not messages:
            raise TemplateError(
                "TitoSession.start needs at least one message (e.g. the task instruction as a user message); "
                "got an empty list, which would prompt the model with a bare generation prompt"
            )
        return self.tokenizer.encode_chat(self._render(messages, add_generation_prompt=True))

    def glue(self, sampled_ids: Sequence[int]) -> list[int]:
        r"""Ids that close the assistant turn after ``sampled_ids``: ``[im_end]`` if missing, then ``\n``."""
        closing = (
            [] if sampled_ids and sampled_ids[-1] == self.tokenizer.im_end_id else [self.tokenizer.im_end_id]
        )
        return closing + self.tokenizer.encode("\n")

    def incremental_text(self, new_messages: Sequence[Mapping[str, Any]]) -> str:
        """Render only ``new_messages`` plus the generation prompt: the suffix after a closed assistant turn.

        The messages are rendered under a fixed history; the text of that history must be a prefix of the
        longer render (the template is append-only), and the suffix is what follows it. The text is for
        display and checks; `next_prompt` encodes the same suffix with message content kept plain.

        Raises:
            TemplateError: invalid messages, or the template rewrote the fixed history (not append-only).
        """
        return self.tokenizer.unescape_content(self._incremental_escaped(new_messages))

    def _incremental_escaped(self, new_messages: Sequence[Mapping[str, Any]]) -> str:
        # The suffix as `encode_chat` reads it: structure as text, message content escaped.
        full = self._render([*_PREFIX_MESSAGES, *new_messages], add_generation_prompt=True)
        if not full.startswith(self._prefix_text):
            raise TemplateError(
                "chat template is not append-only: appending messages changed the text of earlier turns, "
                "so incremental TITO prompts would differ from a full render"
            )
        return full[len(self._prefix_text) :]

    def next_prompt(
        self,
        prev_prompt_ids: Sequence[int],
        sampled_ids: Sequence[int],
        new_messages: Sequence[Mapping[str, Any]],
    ) -> list[int]:
        """Build p_{i+1} from p_i, the sampled a_i and the messages appended after the assistant turn.

        Args:
            prev_prompt_ids: p_i, exactly as sent to the sampler ``[len(p_i)]``.
            sampled_ids: a_i, exactly as the sampler returned them ``[len(a_i)]`` (stop token included if
                emitted).
            new_messages: Messages appended after the assistant's reply (tool results, observations as user
                turns); the assistant's reply itself is represented by ``sampled_ids`` and is not re-rendered.

        Returns:
            ``prev_prompt_ids + sampled_ids + glue + encode(incremental text)``.

        Raises:
            TemplateError: invalid messages or a template that is not append-only.
        """
        # The suffix starts with <|im_start|>, a special token, so encoding it alone cannot merge with the
        # glue. Observations are content: plain text, never control ids.
        suffix = self.tokenizer.encode_chat(self._incremental_escaped(new_messages))
        return [*prev_prompt_ids, *sampled_ids, *self.glue(sampled_ids), *suffix]


class PromptBuffer:
    """Append-only token-id buffer whose prompts are views of one array, so stitching compares only new ids.

    ``extend`` appends ids and returns the whole sequence so far as a 1-D int64 view. While the capacity
    lasts, each returned prompt shares the memory of the previous one, and `t1_tito.stitch` recognises the
    shared prefix without comparing it (T1 §4.1, strict case); when the buffer grows (capacity doubled, the
    old array left to the views that hold it) one full comparison follows, so the total cost stays linear
    in tokens. Ids already handed out are never overwritten.

    Args:
        ids: The first prompt ``[n]``.
        capacity: Initial capacity in ids (default: twice the first prompt, at least 4,096).
    """

    def __init__(self, ids: Sequence[int] | np.ndarray, capacity: int = 0) -> None:
        first = np.asarray(ids, dtype=np.int64)
        size = capacity if capacity > 0 else max(2 * first.shape[0], 4096)
        self._buf = np.empty(max(size, first.shape[0]), dtype=np.int64)
        self._buf[: first.shape[0]] = first
        self._len = first.shape[0]

    def view(self) -> np.ndarray:
        """The ids so far, a read-only int64 view ``[n]``."""
        out = self._buf[: self._len]
        out.flags.writeable = False
        return out

    def extend(self, *parts: Sequence[int] | np.ndarray) -> np.ndarray:
        """Append each part's ids and return `view` (e.g. ``extend(sampled, glue, suffix)``)."""
        arrays = [np.asarray(p, dtype=np.int64) for p in parts]
        n = self._len + sum(a.shape[0] for a in arrays)
        if n > self._buf.shape[0]:
            grown = np.empty(max(n, 2 * self._buf.shape[0]), dtype=np.int64)
            grown[: self._len] = self._buf[: self._len]
            self._buf = grown
        for a in arrays:
            self._buf[self._len : self._len + a.shape[0]] = a
            self._len += a.shape[0]
        return self.view()
