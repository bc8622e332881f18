"""Routing records: compact in memory, SGLang's int32 on the wire, the row-count contract, fail-closed checks.

A routing record for a sequence of T tokens is an array ``[T - 1, L, k]``: for every position that went
through a forward pass (the prompt and every sampled token except the last), the k experts each of the L MoE
layers selected (dense layers have no column). SGLang returns it as ``meta_info["routed_experts"]``, the
base64 of the little-endian int32 bytes of that array flattened (rows cover ``[routed_experts_start_len,
seqlen - 1)``, dense layers zero-filled). In memory, in samples and on disk T1 keeps it compact: one byte per
expert id when E <= 256, two when E <= 65,536 (`routing_dtype`), so the paper's shape (L, k, E) = (48, 8,
256) costs 384 B/token instead of the wire's 1,536 (T1 §4.2).
"""

from __future__ import annotations

import base64
import binascii
import numbers
import os
from collections.abc import Sequence

import numpy as np

__all__ = [
    "RoutingMismatchError",
    "bytes_per_token",
    "check_routing",
    "check_start_len",
    "compact_routing",
    "decode_routed_experts",
    "encode_routed_experts",
    "load_routing",
    "pad_rows",
    "routing_dtype",
    "save_routing",
]

_WIRE_DTYPE = np.dtype("<i4")


class RoutingMismatchError(ValueError):
    """A routing record does not fit the tokens or the model it is applied to: the one routing error of T1.

    Raised on ingest (`decode_routed_experts`, `check_routing`), by `t1_tito` when turns' rows do not tile a
    chunk, and before a replayed forward (`t1_r3.replay_routing`); `t1_tito.RoutingMismatchError` is this same
    class. The message says what disagrees (rows vs tokens, shape, expert id range, layer count), where, and
    how to fix it. The caller aborts that sample: replaying a misaligned record would silently differentiate
    a sub-network that never produced the tokens (T1 §4.2, "missing routing aborts"). A `ValueError`, so
    callers that refuse bad input as `ValueError` refuse a bad record too.
    """


def _positive_int(name: str, value: object) -> int:
    """``value`` as an int >= 1, or ValueError naming ``name``."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def _integer_ids(routing: np.ndarray, prefix: str = "") -> None:
    """Refuse a record whose dtype is not an integer type (a float 2.7 would silently become expert 2).

    Raises:
        RoutingMismatchError: naming the dtype.
    """
    if not np.issubdtype(routing.dtype, np.integer):
        raise RoutingMismatchError(
            f"{prefix}routing dtype {routing.dtype} is not an integer type: expert ids are integers, and "
            "converting would silently truncate (2.7 -> 2); pass the record as an integer array (int32 on "
            "the wire)"
        )


def routing_dtype(num_experts: int) -> np.dtype:
    """The compact dtype of a record's expert ids: uint8 when E <= 256, uint16 when E <= 65,536 (T1 §4.2).

    The one place that picks it: capture (`t1_r3.capture_routing`), the SGLang decode and `compact_routing`
    all call this function, so every record of one model has one dtype.

    Raises:
        ValueError: ``num_experts`` is not an integer in ``[1, 65536]``.
    """
    num_experts = _positive_int("num_experts", num_experts)
    if num_experts <= 256:
        return np.dtype(np.uint8)
    if num_experts <= 65536:
        return np.dtype(np.uint16)
    raise ValueError(f"num_experts={num_experts} exceeds 65536; no compact routing dtype holds its ids")


def bytes_per_token(num_layers: int, top_k: int, num_experts: int | None = None) -> int:
    """Bytes of routing record per token: ``L * k * itemsize``.

    Without ``num_experts`` the itemsize is the wire's int32: 1,536 B for (L, k) = (48, 8) (T1 §4.2). With it,
    the compact one of `routing_dtype`: 384 B for the paper's (48, 8, 256).

    Raises:
        ValueError: ``num_layers``, ``top_k`` or ``num_experts`` is not an integer >= 1 (or E > 65,536).
    """
    num_layers = _positive_int("num_layers", num_layers)
    top_k = _positive_int("top_k", top_k)
    itemsize = _WIRE_DTYPE.itemsize if num_experts is None else routing_dtype(num_experts).itemsize
    return num_layers * top_k * itemsize


def _ids_below(values: np.ndarray, num_experts: int, what: str) -> None:
    """Refuse ids outside ``[0, num_experts)`` before a narrowing cast would wrap them (300 -> 44).

    One pass: viewed as unsigned, a negative id is huge, so one comparison catches both ends.

    Raises:
        RoutingMismatchError: naming the first bad id and its flat position.
    """
    if not values.size:
        return
    unsigned = values.view(np.dtype(f"u{values.dtype.itemsize}")) if values.dtype.kind == "i" else values
    if int(unsigned.max()) >= num_experts:
        pos = int(np.flatnonzero(unsigned >= num_experts)[0])
        raise RoutingMismatchError(
            f"{what}: expert id {int(values.flat[pos])} at flat position {pos} is outside "
            f"[0, {num_experts}); the record belongs to a model with more experts, or it is corrupt"
        )


def compact_routing(routing: np.ndarray, *, num_experts: int) -> np.ndarray:
    """A record in the compact dtype of `routing_dtype` (uint8 for E <= 256), ids range-checked first.

    Args:
        routing: integer ``[rows, L, k]`` of any integer dtype (int32 from the wire, int64 from torch).
        num_experts: E of the model.

    Returns:
        ``routing`` itself when it already has the compact dtype, else a fresh compact copy.

    Raises:
        RoutingMismatchError: a non-integer dtype, or an id outside ``[0, num_experts)`` (checked before the
            cast, so nothing wraps around).
        ValueError: ``num_experts`` outside ``[1, 65536]``.
    """
    dtype = routing_dtype(num_experts)
    routing = np.asarray(routing)
    if routing.dtype == dtype:
        return routing
    _integer_ids(routing)
    _ids_below(routing, num_experts, "compact_routing")
    return routing.astype(dtype)


def _layer_columns(moe_layers: Sequence[int], num_layers: int) -> slice | np.ndarray:
    """The wire columns of the MoE layers, as a slice when they are contiguous (a view, no copy)."""
    cols = [int(c) for c in moe_layers]
    if not cols or len(set(cols)) != len(cols) or min(cols) < 0 or max(cols) >= num_layers:
        raise ValueError(
            f"moe_layers {cols} must be distinct layer indices in [0, {num_layers}) (num_layers on the wire)"
        )
    if cols == list(range(cols[0], cols[-1] + 1)):
        return slice(cols[0], cols[-1] + 1)
    return np.asarray(cols)


def decode_routed_experts(
    payload: str | bytes,
    *,
    num_layers: int,
    top_k: int,
    num_experts: int | None = None,
    moe_layers: Sequence[int] | None = None,
) -> np.ndarray:
    """Decodes SGLang's ``meta_info["routed_experts"]`` into a ``[rows, L_moe, k]`` record.

    The decode a rollout pays per request, so it runs a fixed number of numpy passes: base64, one range check
    on the int32 values (negative and too-large ids in one comparison), one narrowing cast. With
    ``num_experts`` the record comes out compact (`routing_dtype`: uint8 for E <= 256), the dtype the rest of
    T1 keeps; without it, int32 as on the wire.

    Args:
        payload: base64 text (str or ASCII bytes) of little-endian int32 values.
        num_layers: L on the wire, the served model's ``num_hidden_layers`` (dense layers are present there,
            zero-filled).
        top_k: k, experts per token.
        num_experts: E of the served model; None = ids only checked to be non-negative, int32 kept.
        moe_layers: the wire columns that are MoE layers (e.g. ``range(3, 61)`` for DeepSeek-V3's
            ``first_k_dense_replace = 3``); the others are dense and dropped after checking they are zero.
            None = every layer is MoE.

    Returns:
        A fresh, writable array ``[rows, len(moe_layers) or L, k]``, native byte order, compact dtype when
        ``num_experts`` is given, else int32.

    Raises:
        RoutingMismatchError: the payload is not base64, its byte count is not a multiple of 4, its element
            count is not a multiple of ``L * k`` (wrong layer count or top-k for this model), an expert id is
            outside ``[0, num_experts)`` (or negative), or a column named dense holds a non-zero id (the
            ``moe_layers`` given do not match the served model).
        ValueError: bad ``num_layers``, ``top_k``, ``num_experts`` or ``moe_layers`` arguments.
    """
    if num_layers < 1 or top_k < 1:
        raise ValueError(f"num_layers={num_layers} and top_k={top_k} must be >= 1")
    dtype = _WIRE_DTYPE if num_experts is None else routing_dtype(num_experts)
    cols = slice(None) if moe_layers is None else _layer_columns(moe_layers, num_layers)
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise RoutingMismatchError(f"routed_experts payload is not valid base64 ({exc})") from exc
    if len(raw) % _WIRE_DTYPE.itemsize:
        raise RoutingMismatchError(
            f"routed_experts payload has {len(raw)} bytes, not a multiple of 4 (int32); "
            "the payload is truncated"
        )
    flat = np.frombuffer(raw, dtype=_WIRE_DTYPE)
    per_row = num_layers * top_k
    if flat.size % per_row:
        raise RoutingMismatchError(
            f"routed_experts has {flat.size} int32 values, not a multiple of "
            f"L*k = {num_layers}*{top_k} = {per_row}; "
            "the engine serves a model with another layer count or top-k than the trainer's model spec"
        )
    wire = flat.reshape(-1, num_layers, top_k)
    if moe_layers is not None:
        dense = np.setdiff1d(np.arange(num_layers), np.arange(num_layers)[cols])
        if dense.size and wire[:, dense].any():
            layer = int(dense[wire[:, dense].any(axis=(0, 2))][0])
            raise RoutingMismatchError(
                f"routed_experts: wire layer {layer} is listed as dense (not in moe_layers) but holds expert "
                "ids; SGLang zero-fills dense layers, so moe_layers does not match the served model"
            )
        wire = wire[:, cols]
    if num_experts is None:
        if wire.size and int(wire.min()) < 0:
            pos = int(np.flatnonzero(wire.ravel() < 0)[0])
            raise RoutingMismatchError(
                f"routed_experts: expert id {int(wire.ravel()[pos])} at flat position {pos} is negative"
            )
        return wire.astype(np.int32)  # native order, writable, never a view of the payload
    _ids_below(wire.reshape(-1) if wire.flags.c_contiguous else wire, num_experts, "routed_experts")
    return wire.astype(dtype)


def encode_routed_experts(routing: np.ndarray) -> str:
    """Encodes an int ``[rows, L, k]`` array (compact or not) as SGLang does: base64 of little-endian int32.

    Raises:
        RoutingMismatchError: the array is not 3-D, its dtype is not an integer type (floats would be
            truncated), or it holds values outside int32.
    """
    routing = np.asarray(routing)
    if routing.ndim != 3:
        raise RoutingMismatchError(f"routing must be [rows, L, k]; got shape {routing.shape}")
    _integer_ids(routing)
    if routing.size and (routing.min() < np.iinfo(np.int32).min or routing.max() > np.iinfo(np.int32).max):
        raise RoutingMismatchError("routing holds values outside int32")
    return base64.b64encode(np.ascontiguousarray(routing, dtype=_WIRE_DTYPE).tobytes()).decode("ascii")


def check_start_len(start_len: object, *, num_tokens: int | None = None, where: str = "") -> int:
    """The one rule for a record's start length (SGLang ``routed_experts_start_len``, T1 §4.2).

    The first position the rows cover: an integer (not a bool) in ``[0, num_tokens - 1]``, 0 meaning the
    whole sequence; ``num_tokens - 1`` is the last position a forward consumed, so no row can start later.
    `check_routing` applies it to every record, and `t1_tito` to every turn (even one without a record).

    Args:
        start_len: the value to check.
        num_tokens: tokens of the sequence (prompt plus output of a turn); None checks only the lower bound.
        where: prefix of the error message naming the record or turn (``"turn 3"``); empty = none.

    Returns:
        ``start_len`` as an int.

    Raises:
        RoutingMismatchError: (a `ValueError`) not an integer, negative, or beyond ``num_tokens - 1``; the
            message names ``routed_experts_start_len``, ``where`` and the bound.
    """
    prefix = f"{where}: " if where else ""
    if not isinstance(start_len, numbers.Integral) or isinstance(start_len, bool):
        raise RoutingMismatchError(
            f"{prefix}routed_experts_start_len must be an integer, got {type(start_len).__name__} "
            f"{start_len!r}"
        )
    if start_len < 0:
        raise RoutingMismatchError(
            f"{prefix}routed_experts_start_len = {start_len} is negative; it is the first position the rows "
            "cover (0 = the whole sequence)"
        )
    if num_tokens is not None and start_len > num_tokens - 1:
        raise RoutingMismatchError(
            f"{prefix}routed_experts_start_len = {start_len} is beyond the last routed position of "
            f"{num_tokens} tokens (at most num_tokens - 1 = {num_tokens - 1})"
        )
    return int(start_len)


def check_routing(
    routing: np.ndarray,
    *,
    num_tokens: int,
    start_len: int = 0,
    num_layers: int | None = None,
    top_k: int | None = None,
    num_experts: int | None = None,
    where: str = "",
) -> None:
    """Checks a routing record against its tokens and, when given, its model; fails closed (T1 §4.2).

    The one routing contract of T1: every stage that holds a record (the engines on ingest, `t1_tito` when it
    takes a turn and when it closes a chunk, the trainer before replay) calls this function, so one exception
    class, `RoutingMismatchError`, reports every misaligned record.

    Checks, in order: a 3-D integer array ``[rows, L, k]``, with the model's L and k where given; rows ==
    ``num_tokens - 1 - start_len`` (the TITO contract: any other count means the trainer's tokens are not the
    ones the sampler consumed); no negative expert id, and ids below ``num_experts`` where given; when
    ``top_k`` is given and above 1, no MoE layer all zero (slime's check for pipeline stages that never
    merged their captures) and no expert repeated within a row. A caller that does not know the model (TITO
    stitching) passes only the token count and checks the row contract alone.

    Any integer dtype is accepted: the compact uint8 / uint16 of `routing_dtype` (what capture, the SGLang
    decode and samples hold), int32 (the wire) or int64 (torch indices). The checks are a fixed number of
    numpy passes (no sort), so checking costs a fraction of decoding.

    Args:
        routing: integer ``[rows, L, k]``.
        num_tokens: tokens of the sample (or prompt plus output of the turn) the record belongs to.
        start_len: first row covered (SGLang ``routed_experts_start_len``); 0 = the whole sequence.
        num_layers: L of the model; None = taken from the record.
        top_k: k of the model; None = taken from the record, and the per-row checks are skipped.
        num_experts: E of the model; None = expert ids are only checked to be non-negative.
        where: prefix of every error message naming the record (``"turn 3"``); empty = none.

    Raises:
        ValueError: ``num_tokens``, ``num_layers``, ``top_k`` or ``num_experts`` below 1 (bad arguments, not a
            bad record), naming the argument.
        RoutingMismatchError: ``start_len`` refused by `check_start_len`, or the first check above that
            failed, with the numbers.
    """
    prefix = f"{where}: " if where else ""
    _positive_int("num_tokens", num_tokens)
    for name, value in (("num_layers", num_layers), ("top_k", top_k), ("num_experts", num_experts)):
        if value is not None:
            _positive_int(name, value)
    start_len = check_start_len(start_len, num_tokens=num_tokens, where=where)
    routing = np.asarray(routing)
    if (
        routing.ndim != 3
        or (num_layers is not None and routing.shape[1] != num_layers)
        or (top_k is not None and routing.shape[2] != top_k)
    ):
        layers = "" if num_layers is None else f"={num_layers}"
        slots = "" if top_k is None else f"={top_k}"
        raise RoutingMismatchError(
            f"{prefix}routing shape {routing.shape} is not [rows, L{layers}, k{slots}]; the record comes "
            "from a model with another layer count or top-k"
        )
    _integer_ids(routing, prefix)
    expected_rows = num_tokens - 1 - start_len
    if routing.shape[0] != expected_rows:
        raise RoutingMismatchError(
            f"{prefix}routing has {routing.shape[0]} rows but {num_tokens} tokens (start_len {start_len}) "
            f"need {expected_rows} (expected rows = tokens - 1 - start_len); the token stream and the record "
            "are misaligned (TITO bug or a turn whose routing was not requested)"
        )
    if routing.size == 0:
        return
    if routing.dtype.kind == "i" and int(routing.min()) < 0:  # compact records are unsigned: nothing to scan
        bad = np.argwhere(routing < 0)[0]
        bound = num_experts if num_experts is not None else "E"
        raise RoutingMismatchError(
            f"{prefix}expert id {int(routing[tuple(bad)])} at [row {bad[0]}, layer {bad[1]}, slot {bad[2]}] "
            f"is negative; expert ids are indices in [0, {bound}) (a corrupt or mis-decoded record)"
        )
    if num_experts is not None and int(routing.max()) >= num_experts:
        bad = np.argwhere(routing >= num_experts)[0]
        raise RoutingMismatchError(
            f"{prefix}expert id {int(routing[tuple(bad)])} at [row {bad[0]}, layer {bad[1]}, slot {bad[2]}] "
            f"is outside [0, {num_experts}); the record belongs to a model with more experts"
        )
    if top_k is not None and top_k > 1:
        dup = _repeated_expert(routing)
        if dup is None:
            return
        # An all-zero layer repeats expert 0 in every row: report that cause, it names the engine's bug.
        zero_layers = np.flatnonzero(~routing.any(axis=(0, 2)))
        if zero_layers.size:
            raise RoutingMismatchError(
                f"{prefix}MoE layers {zero_layers.tolist()} are all zero in the routing record; the engine "
                "did not capture them (e.g. pipeline stages did not merge their captures); refusing to "
                "replay expert 0 everywhere"
            )
        row, layer = dup
        raise RoutingMismatchError(
            f"{prefix}routing row {row}, layer {layer} repeats an expert: "
            f"{routing[row, layer].tolist()}; top-k selections are distinct"
        )


def _repeated_expert(routing: np.ndarray) -> tuple[int, int] | None:
    """``(row, layer)`` of the first selection that repeats an expert, or None.

    Compares the k slots pairwise on contiguous ``[k, rows * L]`` columns: k (k - 1) / 2 elementwise passes
    over ``rows * L`` ids, no sort (a sort along a short last axis costs ~15x more, and dominated the decode).
    """
    k = routing.shape[2]
    cols = np.ascontiguousarray(routing.reshape(-1, k).T)
    repeated = np.zeros(cols.shape[1], dtype=bool)
    scratch = np.empty(cols.shape[1], dtype=bool)
    for i in range(k - 1):
        for j in range(i + 1, k):
            np.equal(cols[i], cols[j], out=scratch)
            repeated |= scratch
    if not repeated.any():
        return None
    flat = int(np.flatnonzero(repeated)[0])
    return divmod(flat, routing.shape[1])


def pad_rows(num_rows: int, *, num_layers: int, top_k: int, num_experts: int, offset: int = 0) -> np.ndarray:
    """Padding rows for positions without a record: distinct experts per row, spread over experts.

    Row r, layer l holds experts ``(c * k + j) mod E`` for ``j < k`` with ``c = offset + r * L + l``: never a
    constant, so padded tokens do not all land on one expert (slime #822, miles #2697).

    Returns:
        int32 ``[num_rows, L, k]``.

    Raises:
        ValueError: ``num_rows`` < 0; ``num_layers``, ``top_k`` or ``num_experts`` < 1; ``top_k >
            num_experts`` (distinct experts impossible).
    """
    if not isinstance(num_rows, numbers.Integral) or isinstance(num_rows, bool) or num_rows < 0:
        raise ValueError(f"num_rows must be an integer >= 0, got {num_rows!r}")
    for name, value in (("num_layers", num_layers), ("top_k", top_k), ("num_experts", num_experts)):
        _positive_int(name, value)
    if top_k > num_experts:
        raise ValueError(f"top_k={top_k} > num_experts={num_experts}")
    cell = offset + np.arange(num_rows * num_layers, dtype=np.int64).reshape(num_rows, num_layers, 1)
    return ((cell * top_k + np.arange(top_k)) % num_experts).astype(np.int32)


def save_routing(path: str | os.PathLike[str], routing: np.ndarray, *, num_experts: int) -> None:
    """Writes a record to ``path`` as a ``.npy`` file in its compact dtype (384 B/token at the paper's shape).

    Args:
        path: the file to write (numpy appends ``.npy`` when missing).
        routing: integer ``[rows, L, k]``.
        num_experts: E of the model; picks the dtype (`routing_dtype`) and bounds the ids.

    Raises:
        RoutingMismatchError: not 3-D, not integer, or an id outside ``[0, num_experts)``.
    """
    routing = np.asarray(routing)
    if routing.ndim != 3:
        raise RoutingMismatchError(f"routing must be [rows, L, k]; got shape {routing.shape}")
    np.save(path, compact_routing(routing, num_experts=num_experts), allow_pickle=False)


def load_routing(path: str | os.PathLike[str]) -> np.ndarray:
    """Reads a record written by `save_routing`: ``[rows, L, k]`` uint8 or uint16, as it was written.

    Raises:
        RoutingMismatchError: the file does not hold a 3-D uint8 / uint16 array (not a T1 routing record).
        OSError: the file cannot be read.
    """
    routing = np.load(path, allow_pickle=False)
    if routing.ndim != 3 or routing.dtype not in (np.dtype(np.uint8), np.dtype(np.uint16)):
        raise RoutingMismatchError(
            f"{os.fspath(path)}: holds {routing.dtype} {routing.shape}, not a compact [rows, L, k] uint8 / "
            "uint16 routing record (see t1_r3.save_routing)"
        )
    return routing
