"""TITO's four boundary cases between turn i and turn i + 1: strict, normalized, retokenized, split (T1 §4.1).

Each test looks at T_i = p_i || a_i (the previous prompt and its sampled answer) and the next prompt p_(i+1),
as 1-D integer arrays, and says where in p_(i+1) the new context starts (``context_start``, c): the stitched
stream continues with ``p_(i+1)[c:]`` after the sampled a_i, so the sampled ids always stay in the stream and
whatever the harness put in their place never enters it (T1 §4.1, Eq. 8, Fig. 5). All tests are vectorised
comparisons; none re-encodes anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from t1_tito.tokenizer import Tokenizer

__all__ = [
    "BoundaryCase",
    "answer_close",
    "common_prefix_len",
    "differing_core",
    "normalized_drop",
    "retokenized_span",
    "routing_start_len",
    "strict_prefix",
    "data_start",
]

CaseKind = Literal["strict", "normalized", "retokenized", "split", "forced_split"]


@dataclass(frozen=True)
class BoundaryCase:
    """How the boundary before turn ``turn`` was stitched (T1 §4.1, "Boundary repair cases").

    Attributes:
        turn: Index of the later turn (i + 1) in the trial.
        kind: ``strict``, ``normalized``, ``retokenized``, ``split`` (no enabled case applied: a new chunk) or
            ``forced_split`` (the turn's ``starts_chunk``).
        context_start: c, the position in p_(i+1) where the new context starts (0 for a split).
        s: Ids dropped from the tail of p_i (normalized and retokenized cases; else 0).
        u: Ids dropped from the tail of a_i (normalized case; else 0).
        copy_start: b, start of the re-tokenized copy of a_i in p_(i+1) (retokenized case; else 0).
        retokenized_ids: Ids of a_i that differ from their copy once the common prefix and suffix are
            trimmed (retokenized case; else 0).
    """

    turn: int
    kind: CaseKind
    context_start: int = 0
    s: int = 0
    u: int = 0
    copy_start: int = 0
    retokenized_ids: int = 0


def common_prefix_len(x: np.ndarray, y: np.ndarray) -> int:
    """Length of the longest common prefix of two 1-D integer arrays (one vectorised comparison)."""
    n = min(x.shape[0], y.shape[0])
    if n == 0:
        return 0
    differ = x[:n] != y[:n]
    first = int(differ.argmax())
    return first if differ[first] else n


def strict_prefix(
    prompt: np.ndarray, output: np.ndarray, next_prompt: np.ndarray, *, same_start: bool | None = None
) -> bool:
    """Whether T_i = prompt || output is a bit-exact prefix of ``next_prompt`` (T1 §4.1, case 1).

    Compares ``next_prompt[:len(prompt)]`` with ``prompt`` and the following ids with ``output``, without
    building T_i: memory-speed, and for a boundary TITO built (`TitoSession`) the only test that runs. When
    both prompts start at the very same element (prompts held in one append-only buffer, `PromptBuffer`),
    ``next_prompt[:len(prompt)]`` is ``prompt``'s own memory and equal without a comparison, so only the
    sampled ids are compared.

    Args:
        prompt: p_i, 1-D integer ``[len(p_i)]``.
        output: a_i, 1-D integer ``[len(a_i)]``.
        next_prompt: p_(i+1), 1-D integer.
        same_start: whether the two prompts start at the same element (`data_start` equal); None computes
            it here. A caller that stitches many turns passes it, having taken each prompt's start once.
    """
    n_p, n = prompt.shape[0], prompt.shape[0] + output.shape[0]
    if next_prompt.shape[0] < n:
        return False
    if same_start is None:
        same_start = data_start(prompt) == data_start(next_prompt)
    return (same_start or bool((next_prompt[:n_p] == prompt).all())) and bool(
        (next_prompt[n_p:n] == output).all()
    )


def data_start(x: np.ndarray) -> tuple[int, str, tuple[int, ...]]:
    """Where a 1-D array's elements start, with its dtype and strides: equal for two views of one memory."""
    return x.__array_interface__["data"][0], x.dtype.str, x.strides


def normalized_drop(
    prompt: np.ndarray,
    output: np.ndarray,
    next_prompt: np.ndarray,
    *,
    max_s: int,
    max_u: int,
    tokenizer: Tokenizer | None = None,
) -> tuple[int, int, int] | None:
    """The smallest (s, u) making drop_s(p_i) || drop_u(a_i) a prefix of p_(i+1) (T1 §4.1, case 2).

    drop_s removes the last s ids (e.g. an empty think block the template leaves out of the history), drop_u
    the last u ids of the answer (e.g. whitespace or a stop id the harness strips). Among (s, u) in [0,
    max_s] x [0, max_u] the one with the least s + u wins, the smaller s on a tie. At least one id of p_i
    and, when a_i is not empty, one of a_i must remain (s < len(p_i), u < len(a_i)): a boundary that keeps
    none of them is no repair, and the next inference saw none of the sampled ids.

    The sampled a_i stays in the stream whole, so whatever the harness rendered in place of its dropped tail
    must not follow it: with u > 0 the new context starts after the harness's version of the answer, which
    ends at its turn close (`answer_close`); a pair whose close cannot be found (no tokenizer, or no
    ``<|im_end|>`` before the next ``<|im_start|>``) is skipped, since a re-serialized tail would otherwise
    enter the stream as context after the sampled ids, with a second ``<|im_end|>``. Likewise, with
    ``tokenizer``, a pair whose dropped answer tail reappears right after the kept prefix re-encoded with the
    same bytes (ending on a token boundary) is skipped: the retokenized case handles it. As the paper's rule
    has it, an s above the smallest possible one is tried too, so a short answer whose head repeats the
    dropped prompt tail (an earlier answer within the last ``max_s`` ids) can match there by coincidence;
    the ids it drops are counted in the audit (``dropped_context_tokens``). One comparison of p_i and, per
    candidate s, one of a_i, stopping as soon as no larger s can do better.

    Returns:
        ``(s, u, c)`` with c the position in p_(i+1) where the new context starts, or None when no pair in
        the bounds works.
    """
    n_p, n_a = prompt.shape[0], output.shape[0]
    s_min = n_p - common_prefix_len(prompt, next_prompt)
    best: tuple[int, int, int] | None = None
    for s in range(s_min, min(max_s, n_p - 1) + 1):
        if best is not None and s >= best[0] + best[1]:
            break  # u >= 0, so s + u cannot beat the best any more
        base = n_p - s
        kept = common_prefix_len(output, next_prompt[base:])
        u = n_a - kept
        if u > max_u or (u and u == n_a) or (best is not None and s + u >= best[0] + best[1]):
            continue
        c = base + kept
        if u:
            if tokenizer is None:
                continue
            if _reappears(output[kept:], next_prompt[c:], tokenizer):
                continue
            close = answer_close(next_prompt, c, tokenizer)
            if close is None:
                continue
            c = close + 1 if output[-1] == tokenizer.im_end_id else close
        best = (s, u, c)
    return best


def answer_close(next_prompt: np.ndarray, start: int, tokenizer: Tokenizer) -> int | None:
    """Where the assistant turn that holds ``next_prompt[start]`` is closed: its ``<|im_end|>`` position.

    The first ``<|im_end|>`` at or after ``start``, provided no ``<|im_start|>`` comes before it (message
    content is encoded without control ids, `Tokenizer.encode_chat`, so the first one ends the message).
    None when the turn is not closed there.
    """
    rest = next_prompt[start:]
    marks = np.flatnonzero((rest == tokenizer.im_end_id) | (rest == tokenizer.im_start_id))
    if marks.shape[0] == 0 or rest[marks[0]] != tokenizer.im_end_id:
        return None
    return start + int(marks[0])


def _reappears(tail: np.ndarray, following: np.ndarray, tokenizer: Tokenizer) -> bool:
    """Whether ``following`` starts with ids whose bytes are exactly those of ``tail``."""
    vocab = tokenizer.vocab_size
    if tail.min() < 0 or tail.max() >= vocab:
        return False
    target = tokenizer.decode_bytes(tail)
    window = following[: len(target)]  # every id decodes to at least one byte
    if window.shape[0] == 0 or window.min() < 0 or window.max() >= vocab:
        return False
    offsets = tokenizer.byte_offsets(window)
    j = int(np.searchsorted(offsets, len(target)))
    return j < offsets.shape[0] and offsets[j] == len(target) and tokenizer.decode_bytes(window[:j]) == target


def retokenized_span(
    prompt: np.ndarray,
    output: np.ndarray,
    next_prompt: np.ndarray,
    *,
    max_s: int,
    tokenizer: Tokenizer,
) -> tuple[int, int, int] | None:
    """Locate the re-tokenized copy ã_i = p_(i+1)[b:e] of a_i by offset mapping (T1 §4.1, case 3, Eq. 8).

    The harness decoded a_i and a re-render encoded the text again, so p_(i+1) = drop_s(p_i) || ã_i || rest
    with dec(ã_i) = dec(a_i). For each candidate b (the end of the longest common prefix of p_i and
    p_(i+1), then down to s = max_s, always keeping one prompt id), the byte offset of b in the decoded
    p_(i+1) (`Tokenizer.byte_offsets`) plus the byte length of dec(a_i) must fall on a token boundary e, and
    the bytes in between must equal dec(a_i) exactly (bytes, not text, so that two different invalid UTF-8
    sequences never match through U+FFFD). ã_i must differ from a_i (else a stricter case applied).

    Returns:
        ``(b, e, s)`` with s = len(p_i) - b, or None: no copy found, an empty a_i, or ids outside the
        tokenizer's vocabulary (nothing to decode).
    """
    n_p = prompt.shape[0]
    if output.shape[0] == 0:
        return None
    lo = max(1, n_p - max_s)
    k = min(common_prefix_len(prompt, next_prompt), n_p)
    if k < lo:
        return None
    segment = next_prompt[lo:]
    if segment.shape[0] == 0:
        return None
    vocab = tokenizer.vocab_size
    if segment.min() < 0 or segment.max() >= vocab or output.min() < 0 or output.max() >= vocab:
        return None
    offsets = tokenizer.byte_offsets(segment)
    text = tokenizer.decode_bytes(segment)
    target = tokenizer.decode_bytes(output)
    for b in range(k, lo - 1, -1):
        begin = int(offsets[b - lo])
        end = begin + len(target)
        j = int(np.searchsorted(offsets, end))
        if j >= offsets.shape[0] or offsets[j] != end or text[begin:end] != target:
            continue
        e = lo + j
        copy = next_prompt[b:e]
        if copy.shape[0] == output.shape[0] and bool((copy == output).all()):
            continue
        return b, e, n_p - b
    return None


def differing_core(sampled: np.ndarray, copy: np.ndarray) -> int:
    """Ids of ``sampled`` left when the common prefix and common suffix with ``copy`` are trimmed."""
    head = common_prefix_len(sampled, copy)
    tail = common_prefix_len(sampled[head:][::-1], copy[head:][::-1])
    return sampled.shape[0] - head - tail


def routing_start_len(
    prompt: Sequence[int] | np.ndarray,
    output: Sequence[int] | np.ndarray,
    next_prompt: Sequence[int] | np.ndarray,
) -> int:
    """The ``routed_experts_start_len`` a harness should request for the turn after (prompt, output).

    ``len(T_i) - 1`` when T_i is a strict prefix of ``next_prompt`` (the rows tile the chunk exactly), else 0:
    a full-sequence record, from which `stitch` takes the rows any repaired or split boundary needs (R3
    rows for positions a repair re-indexes cannot be known before the boundary is classified).
    """
    p, a, nxt = (np.asarray(x) for x in (prompt, output, next_prompt))
    if strict_prefix(p, a, nxt):
        return p.shape[0] + a.shape[0] - 1
    return 0
