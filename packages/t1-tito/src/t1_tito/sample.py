"""Turns as the sampler returned them and the stitched `Sample` with its four aligned streams (T1 §4.1)."""

from __future__ import annotations

import base64
import dataclasses
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from t1_r3 import RoutingMismatchError, check_routing, check_start_len

__all__ = [
    "MAX_TOKEN_ID",
    "as_id_array",
    "check_id_range",
    "check_logprobs",
    "InvalidTurnError",
    "RoutingMismatchError",
    "Sample",
    "StreamMisalignmentError",
    "Turn",
]

#: The dtypes a sample's routing may have: the compact ones of `t1_r3.routing_dtype` and the wire's int32.
ROUTING_DTYPES = (np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.int32))

#: Token ids are stored as int32 in a `Sample` (T1 §4.1 streams); an id at or above this cannot be.
MAX_TOKEN_ID = 2**31 - 1


class StreamMisalignmentError(ValueError):
    """The per-token streams of a turn or sample are not aligned (lengths, routing rows, masked log-probs)."""


class InvalidTurnError(ValueError):
    """A turn's values are out of range.

    A negative or too-large token id, a log-prob that is positive or not finite. A bad
    ``routed_experts_start_len`` is a `t1_r3.RoutingMismatchError` (`t1_r3.check_start_len`).
    """


@dataclass(kw_only=True)
class Turn:
    """One generation call: the prompt the sampler saw and what it emitted (SGLang ``/generate`` shapes).

    Attributes:
        prompt_ids: p_i, the prompt token ids ``[len(p_i)]``: any sequence of integers >= 0 (a list, or a
            1-D integer numpy array).
        output_ids: a_i, the sampled token ids ``[len(a_i)]`` (the stop token included when emitted); same
            kinds as ``prompt_ids``.
        output_logprobs: Sampler log-probabilities of ``output_ids`` ``[len(a_i)]`` (nats, finite, <= 0;
            a list of numbers or a 1-D float numpy array).
        routed_experts: int ``[rows, L, k]`` expert ids or None; rows cover positions
            ``[routed_experts_start_len, len(prompt_ids) + len(output_ids) - 1)`` (SGLang semantics: no row
            for the last sampled token, which was never fed back).
        routed_experts_start_len: First position the rows cover (0: the whole sequence).
        policy_version: Weight version that produced the turn.
        finish_reason: The sampler's reason (``"stop"``, ``"length"``, ...).
        starts_chunk: Begin a new chunk at this turn whatever its prompt (a forced split, counted apart from
            the splits of an unrepairable boundary): the harness sets it on the first turn after it replaced
            the history, e.g. by a context-compaction summary (T1 §9), so that the new context is not
            stitched onto the old one. Ignored on a trial's first turn.
    """

    prompt_ids: Sequence[int] | np.ndarray
    output_ids: Sequence[int] | np.ndarray
    output_logprobs: Sequence[float] | np.ndarray
    policy_version: int
    finish_reason: str
    routed_experts: np.ndarray | None = None
    routed_experts_start_len: int = 0
    starts_chunk: bool = False

    def validate(self, where: str = "turn") -> None:
        """Check the turn's own alignment.

        Raises:
            TypeError: ids that are not a sequence of integers (or a 1-D integer array), log-probs that are
                not numbers, routing that is not a numpy array.
            InvalidTurnError: a token id < 0 or > ``MAX_TOKEN_ID``; a log-prob > 0 or not finite.
            StreamMisalignmentError: log-prob count differs from output count, or empty prompt.
            RoutingMismatchError: a ``routed_experts_start_len`` that is not an integer >= 0
                (`t1_r3.check_start_len`, the same rule and error as `t1_r3.check_routing`'s), or routing
                not ``[rows, L, k]`` integer with the rows SGLang semantics give (`t1_r3.check_routing`).
        """
        n_prompt = _check_ids(self.prompt_ids, f"{where}: prompt_ids")
        n_output = _check_ids(self.output_ids, f"{where}: output_ids")
        if n_prompt == 0:
            raise StreamMisalignmentError(f"{where}: empty prompt_ids")
        logprobs = check_logprobs(self.output_logprobs, f"{where}: output_logprobs")
        if logprobs.size != n_output:
            raise StreamMisalignmentError(f"{where}: {n_output} output ids but {logprobs.size} log-probs")
        start = check_start_len(self.routed_experts_start_len, where=where)
        if self.routed_experts is None:
            return
        r = self.routed_experts
        if not isinstance(r, np.ndarray):
            raise TypeError(f"{where}: routed_experts must be a numpy array or None, got {type(r).__name__}")
        check_routing(r, num_tokens=n_prompt + n_output, start_len=start, where=f"{where}: routed_experts")


def as_id_array(ids: object, where: str) -> np.ndarray:
    """Return a token-id sequence as a 1-D integer array, checking its type but not its values.

    A 1-D integer numpy array is returned as is (no copy, no per-id work). A list or tuple is checked in one
    C-level pass over the element types (`int` or a numpy integer, never `bool`) and converted to int64.

    Raises:
        TypeError: not a 1-D integer array or a sequence of integers.
        InvalidTurnError: an integer too large for int64 (it could never be a token id).
    """
    if isinstance(ids, np.ndarray):
        if ids.ndim != 1 or ids.dtype.kind not in "iu":
            raise TypeError(f"{where} must be a 1-D integer array, got {ids.dtype} {ids.shape}")
        return ids
    if isinstance(ids, Sequence) and not isinstance(ids, str | bytes):
        if not ids:
            return np.zeros(0, dtype=np.int64)
        if not all(issubclass(k, numbers.Integral) and not issubclass(k, bool) for k in set(map(type, ids))):
            bad = next(x for x in ids if not isinstance(x, numbers.Integral) or isinstance(x, bool))
            raise TypeError(f"{where} must hold integer token ids, got {type(bad).__name__} {bad!r}")
        try:
            return np.asarray(ids, dtype=np.int64)
        except OverflowError:
            raise InvalidTurnError(f"{where}: a token id exceeds {MAX_TOKEN_ID} (int32 stream)") from None
    raise TypeError(f"{where} must be a sequence of integer token ids, got {type(ids).__name__}")


def check_id_range(ids: np.ndarray, where: str) -> None:
    """Check that every id of a 1-D integer array lies in ``[0, MAX_TOKEN_ID]`` (two vectorised reductions).

    Raises:
        InvalidTurnError: an id < 0 or > ``MAX_TOKEN_ID``, naming the value.
    """
    if not ids.size:
        return
    if ids.dtype.kind == "i" and ids.dtype.itemsize >= 4:
        # One reduction: viewed unsigned, a negative id is above MAX_TOKEN_ID too.
        if ids.view(f"u{ids.dtype.itemsize}").max() <= MAX_TOKEN_ID:
            return
    lo, hi = ids.min(), ids.max()
    if lo < 0:
        raise InvalidTurnError(f"{where}: token id {int(lo)} is negative; ids are vocabulary indices >= 0")
    if hi > MAX_TOKEN_ID:
        raise InvalidTurnError(f"{where}: token id {int(hi)} exceeds {MAX_TOKEN_ID} (int32 stream)")


def _check_ids(ids: object, where: str) -> int:
    """Check a token-id sequence (list/tuple of ints or 1-D integer array) and return its length.

    Raises:
        TypeError: not a sequence of integers.
        InvalidTurnError: an id < 0 or > ``MAX_TOKEN_ID``.
    """
    arr = as_id_array(ids, where)
    check_id_range(arr, where)
    return int(arr.size)


def check_logprobs(logprobs: object, where: str) -> np.ndarray:
    """Check sampler log-probs: 1-D numbers, finite, <= 0 (a probability is at most 1); return float64.

    Raises:
        TypeError: not a 1-D sequence of numbers.
        InvalidTurnError: a value that is not finite or is > 0, naming its index.
    """
    if isinstance(logprobs, np.ndarray):
        arr = logprobs if logprobs.dtype == np.float64 else _as_float64(logprobs, where)
        return _check_logprob_values(arr, where)
    if isinstance(logprobs, str | bytes) or not isinstance(logprobs, Sequence):
        raise TypeError(f"{where} must be a sequence of numbers, got {type(logprobs).__name__}")
    if not all(issubclass(k, numbers.Real) and not issubclass(k, bool) for k in set(map(type, logprobs))):
        bad = next(x for x in logprobs if not isinstance(x, numbers.Real) or isinstance(x, bool))
        raise TypeError(f"{where} must hold numbers, got {type(bad).__name__} {bad!r}")
    return _check_logprob_values(_as_float64(logprobs, where), where)


def _as_float64(logprobs: object, where: str) -> np.ndarray:
    try:
        return np.asarray(logprobs, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{where} must be a 1-D sequence of numbers: {exc}") from exc


def _check_logprob_values(arr: np.ndarray, where: str) -> np.ndarray:
    if arr.ndim != 1:
        raise TypeError(f"{where} must be 1-D, got shape {arr.shape}")
    # Two reductions instead of elementwise masks: NaN propagates through min, +inf fails max <= 0.
    if arr.size and not (np.isfinite(arr.min()) and arr.max() <= 0):
        i = int(np.flatnonzero(~np.isfinite(arr) | (arr > 0))[0])
        raise InvalidTurnError(
            f"{where}[{i}] = {float(arr[i])!r}: a log-probability must be finite and <= 0 (a probability "
            "is at most 1)"
        )
    return arr


@dataclass(kw_only=True)
class Sample:
    """One stitched trajectory chunk: four per-token streams transformed by the same offsets (T1 §4.1).

    The central invariant: ``token_ids``, ``loss_mask`` and ``rollout_logprobs`` have the same length T;
    ``routing`` has T - 1 rows; m_j = 1 iff T_j was sampled, and q_j = m_j log pi(T_j | T_<j) (0 where
    masked).

    Attributes:
        token_ids: int32 ``[T]``.
        loss_mask: int8 ``[T]``, 1 only on sampled tokens.
        rollout_logprobs: float32 ``[T]``, the sampler's log-probs, 0 where masked.
        routing: ``[T-1, L, k]`` expert ids in the record's dtype (uint8 for E <= 256, uint16 for larger
            E: `t1_r3.routing_dtype`; int32 as the wire sends it when E is not known), or None (no routing
            recorded, e.g. a dense model).
        reward: The trajectory's scalar reward (T1 §5.2), placed at ``reward_index``.
        reward_index: The last sampled (loss) position of the chunk.
        task_id: Task identifier.
        family: Task family.
        trial_id: Trial identifier (all chunks of one trial share it).
        chunk_index: 0-based position of this chunk in its trial.
        policy_version: The oldest weight version among the chunk's turns.
        policy_versions_mixed: True when the chunk's turns came from more than one weight version.
    """

    token_ids: np.ndarray
    loss_mask: np.ndarray
    rollout_logprobs: np.ndarray
    routing: np.ndarray | None
    reward: float
    reward_index: int
    task_id: str
    family: str
    trial_id: str
    chunk_index: int
    policy_version: int
    policy_versions_mixed: bool = False

    @property
    def num_tokens(self) -> int:
        """T, the stream length (tokens)."""
        return int(self.token_ids.shape[0])

    def to_json(self) -> dict[str, Any]:
        """The sample as JSON-ready data that `from_json` turns back into an equal sample, bit for bit.

        Every field under its name; each array as ``{"dtype": ..., "shape": [...], "base64": ...}`` of its
        C-order bytes (exact for the float32 log-probs, and a third of the size of a list of numbers for
        the routing rows). For a run's rollout buffer in a checkpoint (`t1.run.resume`).
        """
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, np.ndarray):
                data = base64.b64encode(np.ascontiguousarray(value).tobytes()).decode()
                value = {"dtype": value.dtype.str, "shape": list(value.shape), "base64": data}
            elif isinstance(value, np.generic):
                value = value.item()
            out[f.name] = value
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "sample") -> Sample:
        """The sample `to_json` wrote, checked (`validate`).

        Raises:
            StreamMisalignmentError: a field missing or unknown, an array record that does not decode to its
                dtype and shape, or a decoded sample that breaks the four-stream invariant; ``where`` names
                the record.
        """
        names = {f.name for f in dataclasses.fields(cls)}
        required = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING}
        if not isinstance(data, Mapping) or not required <= set(data) or not set(data) <= names:
            got = sorted(data) if isinstance(data, Mapping) else type(data).__name__
            raise StreamMisalignmentError(f"{where}: not a sample record (fields {got})")
        values = {}
        for name, value in data.items():
            if isinstance(value, Mapping) and set(value) == {"dtype", "shape", "base64"}:
                try:
                    raw = base64.b64decode(value["base64"], validate=True)
                    value = np.frombuffer(raw, dtype=np.dtype(value["dtype"])).reshape(value["shape"]).copy()
                except (ValueError, TypeError) as exc:
                    raise StreamMisalignmentError(f"{where}: {name}: not an array record ({exc})") from None
            values[name] = value
        sample = cls(**values)
        try:
            sample.validate()
        except StreamMisalignmentError as exc:
            raise StreamMisalignmentError(f"{where}: {exc}") from None
        return sample

    def validate(self) -> None:
        """Check the four-stream invariant.

        Raises:
            StreamMisalignmentError: naming what is off: dtypes, shapes, lengths, mask values, log-prob 0 on
                masked positions, non-finite sampled log-probs, routing rows != T - 1, reward not on the last
                loss position.
        """
        where = f"sample {self.trial_id}#{self.chunk_index}"
        checks = (
            (self.token_ids, np.int32, "token_ids"),
            (self.loss_mask, np.int8, "loss_mask"),
            (self.rollout_logprobs, np.float32, "rollout_logprobs"),
        )
        for arr, dtype, name in checks:
            if not isinstance(arr, np.ndarray) or arr.dtype != dtype or arr.ndim != 1:
                got = f"{arr.dtype} {arr.shape}" if isinstance(arr, np.ndarray) else type(arr).__name__
                raise StreamMisalignmentError(
                    f"{where}: {name} must be a 1-D {np.dtype(dtype)} array, got {got}"
                )
        t = self.num_tokens
        if t == 0:
            raise StreamMisalignmentError(f"{where}: empty stream")
        if self.loss_mask.shape[0] != t or self.rollout_logprobs.shape[0] != t:
            raise StreamMisalignmentError(
                f"{where}: lengths differ: token_ids {t}, loss_mask {self.loss_mask.shape[0]}, "
                f"rollout_logprobs {self.rollout_logprobs.shape[0]}"
            )
        if not (self.loss_mask.view(np.uint8) <= 1).all():
            raise StreamMisalignmentError(f"{where}: loss_mask holds values other than 0 and 1")
        masked = self.loss_mask == 0
        bad = np.flatnonzero(masked & (self.rollout_logprobs != 0))
        if bad.size:
            raise StreamMisalignmentError(
                f"{where}: masked positions carry non-zero log-probs, first at {bad[0]}"
            )
        bad = np.flatnonzero(~masked & ~np.isfinite(self.rollout_logprobs))
        if bad.size:
            raise StreamMisalignmentError(f"{where}: non-finite sampled log-prob at position {bad[0]}")
        if self.routing is not None:
            r = self.routing
            bad_rows = None
            typed = isinstance(r, np.ndarray) and r.dtype in ROUTING_DTYPES
            if typed:
                try:
                    check_routing(r, num_tokens=t)
                except RoutingMismatchError as exc:
                    bad_rows = exc
            if not typed or bad_rows is not None:
                got = f"{r.dtype} {r.shape}" if isinstance(r, np.ndarray) else type(r).__name__
                raise StreamMisalignmentError(
                    f"{where}: routing must be uint8, uint16 or int32 [T-1={t - 1}, L, k], got {got}"
                ) from bad_rows
        loss_positions = np.flatnonzero(~masked)
        if loss_positions.size == 0:
            raise StreamMisalignmentError(f"{where}: no sampled (loss) position to carry the reward")
        if not (0 <= self.reward_index < t) or self.loss_mask[self.reward_index] != 1:
            raise StreamMisalignmentError(f"{where}: reward_index {self.reward_index} is not a loss position")
        if self.reward_index != loss_positions[-1]:
            raise StreamMisalignmentError(
                f"{where}: reward_index {self.reward_index} is not the last loss position"
                f" {loss_positions[-1]}"
            )
