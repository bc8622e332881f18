"""Routing records: SGLang's wire format, the row-count contract, and the checks that fail closed (T1 §4.2).

A routing record for a sequence of T tokens is an int32 array ``[T - 1, L, k]``: for every position that went
through a forward pass (the prompt and every sampled token except the last), the k experts each of the L MoE
layers selected. SGLang returns it as ``meta_info["routed_experts"]``, the base64 of the little-endian int32
bytes of that array flattened (rows cover ``[routed_experts_start_len, seqlen - 1)``).
"""

from __future__ import annotations

import base64
import binascii
import numbers

import numpy as np

__all__ = [
    "RoutingMismatchError",
    "bytes_per_token",
    "check_routing",
    "decode_routed_experts",
    "encode_routed_experts",
    "pad_rows",
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


def bytes_per_token(num_layers: int, top_k: int) -> int:
    """Bytes of routing record per token: ``L * k * 4`` (int32); 1,536 B for (L, k) = (48, 8) (T1 §4.2).

    Raises:
        ValueError: ``num_layers`` or ``top_k`` is not an integer >= 1.
    """
    num_layers = _positive_int("num_layers", num_layers)
    top_k = _positive_int("top_k", top_k)
    return num_layers * top_k * _WIRE_DTYPE.itemsize


def decode_routed_experts(payload: str | bytes, *, num_layers: int, top_k: int) -> np.ndarray:
    """Decodes SGLang's ``meta_info["routed_experts"]`` into an int32 ``[rows, L, k]`` array.

    Args:
        payload: base64 text (str or ASCII bytes) of little-endian int32 values.
        num_layers: L, the model's number of hidden layers (dense layers, if any, are present zero-filled).
        top_k: k, experts per token.

    Returns:
        A fresh, writable int32 array ``[rows, L, k]`` in native byte order.

    Raises:
        RoutingMismatchError: the payload is not base64, its byte count is not a multiple of 4, or its element
            count is not a multiple of ``L * k`` (wrong layer count or top-k for this model).
    """
    if num_layers < 1 or top_k < 1:
        raise ValueError(f"num_layers={num_layers} and top_k={top_k} must be >= 1")
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
    return flat.reshape(-1, num_layers, top_k).astype(np.int32)


def encode_routed_experts(routing: np.ndarray) -> str:
    """Encodes an int ``[rows, L, k]`` array as SGLang does: base64 of little-endian int32 (ASCII str).

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

    Args:
        routing: integer ``[rows, L, k]``.
        num_tokens: tokens of the sample (or prompt plus output of the turn) the record belongs to.
        start_len: first row covered (SGLang ``routed_experts_start_len``); 0 = the whole sequence.
        num_layers: L of the model; None = taken from the record.
        top_k: k of the model; None = taken from the record, and the per-row checks are skipped.
        num_experts: E of the model; None = expert ids are only checked to be non-negative.
        where: prefix of every error message naming the record (``"turn 3"``); empty = none.

    Raises:
        ValueError: ``num_tokens``, ``num_layers``, ``top_k`` or ``num_experts`` below 1, or a ``start_len``
            that is not an integer (bad arguments, not a bad record), naming the argument.
        RoutingMismatchError: ``start_len`` outside ``[0, num_tokens - 1]`` (no row could start there), or
            the first check above that failed, with the numbers.
    """
    prefix = f"{where}: " if where else ""
    _positive_int("num_tokens", num_tokens)
    for name, value in (("num_layers", num_layers), ("top_k", top_k), ("num_experts", num_experts)):
        if value is not None:
            _positive_int(name, value)
    if not isinstance(start_len, numbers.Integral) or isinstance(start_len, bool):
        raise ValueError(f"{prefix}start_len must be an integer, got {start_len!r}")
    if start_len < 0:
        raise RoutingMismatchError(
            f"{prefix}start_len = {start_len} is negative; it is the first position the rows cover (0 = the "
            "whole sequence)"
        )
    if start_len > num_tokens - 1:
        raise RoutingMismatchError(
            f"{prefix}start_len = {start_len} is beyond the last routed position of {num_tokens} tokens "
            f"(at most num_tokens - 1 = {num_tokens - 1})"
        )
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
    lo, hi = int(routing.min()), int(routing.max())
    if lo < 0:
        bad = np.argwhere(routing < 0)[0]
        bound = num_experts if num_experts is not None else "E"
        raise RoutingMismatchError(
            f"{prefix}expert id {int(routing[tuple(bad)])} at [row {bad[0]}, layer {bad[1]}, slot {bad[2]}] "
            f"is negative; expert ids are indices in [0, {bound}) (a corrupt or mis-decoded record)"
        )
    if num_experts is not None and hi >= num_experts:
        bad = np.argwhere(routing >= num_experts)[0]
        raise RoutingMismatchError(
            f"{prefix}expert id {int(routing[tuple(bad)])} at [row {bad[0]}, layer {bad[1]}, slot {bad[2]}] "
            f"is outside [0, {num_experts}); the record belongs to a model with more experts"
        )
    if top_k is not None and top_k > 1:
        zero_layers = np.flatnonzero(~routing.any(axis=(0, 2)))
        if zero_layers.size:
            raise RoutingMismatchError(
                f"{prefix}MoE layers {zero_layers.tolist()} are all zero in the routing record; the engine "
                "did not capture them (e.g. pipeline stages did not merge their captures); refusing to "
                "replay expert 0 everywhere"
            )
        srt = np.sort(routing, axis=2)
        dup = np.argwhere((srt[:, :, 1:] == srt[:, :, :-1]).any(axis=2))
        if dup.size:
            row, layer = dup[0]
            raise RoutingMismatchError(
                f"{prefix}routing row {row}, layer {layer} repeats an expert: "
                f"{routing[row, layer].tolist()}; top-k selections are distinct"
            )


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
