"""A TITO session: build each turn's prompt ids from the previous ids, never re-encoding them (T1 §4.1)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

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

    Args:
        tokenizer: From `load_tokenizer`.
        template: The chat template (append-only; see `ChatTemplate`).
        thinking: Open a think block in every generation prompt (default off: an empty block is closed).
    """

    def __init__(self, tokenizer: Tokenizer, template: ChatTemplate, *, thinking: bool = False) -> None:
        self.tokenizer = tokenizer
        self.template = template
        self.thinking = thinking
        self._prefix_text = self._render(_PREFIX_MESSAGES, add_generation_prompt=False)

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
