"""Stitch a trial's turns into training samples under TITO's four boundary cases, with the audit (T1 §4.1)."""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from t1_r3 import RoutingMismatchError, check_routing, check_start_len
from t1_tito.audit import DriftAudit, audit_drift
from t1_tito.boundary import (
    BoundaryCase,
    data_start,
    differing_core,
    normalized_drop,
    retokenized_span,
    strict_prefix,
)
from t1_tito.sample import (
    MAX_TOKEN_ID,
    ROUTING_DTYPES,
    Sample,
    StreamMisalignmentError,
    Turn,
    as_id_array,
    check_id_range,
    check_logprobs,
)
from t1_tito.tokenizer import Tokenizer

__all__ = ["REPAIR_MODES", "DriftAudit", "StitchResult", "audit_drift", "stitch"]

#: Boundary repair modes of T1 §4.1 (002 summary, "Boundary repair cases"), strongest first.
REPAIR_MODES = ("strict", "normalized", "retokenized")


@dataclass(frozen=True)
class StitchResult:
    """What `stitch` returns.

    Attributes:
        samples: One validated `Sample` per non-empty chunk, in chunk order.
        chunks_split: New chunks begun after the first: unrepairable boundaries plus forced splits.
        audit: The `DriftAudit` (boundary-case counts, loss-region drift, re-tokenized context).
        boundaries: How each boundary was stitched, one `BoundaryCase` per turn after the first.
    """

    samples: list[Sample]
    chunks_split: int
    audit: DriftAudit = field(repr=False)
    boundaries: tuple[BoundaryCase, ...] = field(default=(), repr=False)


@dataclass
class _Chunk:
    """One chunk under construction: the id arrays it is made of, and where its sampled spans lie."""

    first_turn: int
    token_parts: list[np.ndarray] = field(default_factory=list)
    loss_spans: list[tuple[int, np.ndarray]] = field(default_factory=list)  # (stream start, log-probs)
    length: int = 0
    routing_parts: list[np.ndarray] = field(default_factory=list)
    rows_covered: int = 0
    has_routing: bool = False
    missing_turn: int | None = None  # a turn without routing after routed ones; only a full record heals it
    aligned: bool = True  # every boundary so far strict: stream positions = each turn's own positions
    versions: list[int] = field(default_factory=list)
    part_where: list[str] = field(default_factory=list)  # which turn's ids each part is, for range errors

    def append(self, context: np.ndarray, output: np.ndarray, logprobs: np.ndarray, where: str) -> None:
        if context.shape[0]:
            self.token_parts.append(context)
            self.part_where.append(f"{where}: prompt_ids")
            self.length += context.shape[0]
        if output.shape[0]:
            self.token_parts.append(output)
            self.part_where.append(f"{where}: output_ids")
            self.loss_spans.append((self.length, logprobs))
            self.length += output.shape[0]

    def add_routing(self, turn: Turn, index: int, context_start: int, stream_start: int) -> None:
        """Take the turn's rows for the stream positions it adds (turn position c - 1 on, at stream d - 1)."""
        r = turn.routed_experts
        if r is None:
            if self.has_routing and self.missing_turn is None:
                self.missing_turn = index
            return
        start = turn.routed_experts_start_len
        if self.routing_parts and r.shape[1:] != self.routing_parts[0].shape[1:]:
            raise RoutingMismatchError(
                f"turn {index}: routed_experts [.., L, k] = {r.shape[1:]} differs from earlier "
                f"{self.routing_parts[0].shape[1:]}"
            )
        if self.aligned:
            if start == 0:
                self.routing_parts = [r]  # a full-sequence record supersedes the rows so far
                self.missing_turn = None
            elif start == self.rows_covered and self.has_routing:
                self.routing_parts.append(r)
            else:
                kind = "gap" if start > self.rows_covered else "overlap"
                raise RoutingMismatchError(
                    f"turn {index}: routed_experts_start_len = {start} but the chunk starting at turn "
                    f"{self.first_turn} has rows for positions [0, {self.rows_covered}) ({kind}); request "
                    f"start_len = {self.rows_covered} or 0"
                )
            self.has_routing = True
            self.rows_covered = start + r.shape[0]
            return
        # After a repaired boundary the turn's own positions are not the stream's: from its position c - 1 on,
        # turn position j is stream position j - c + d. Rows before c - 1 index ids the stream does not hold.
        if self.missing_turn is not None:
            return  # rows of an earlier turn are missing for good; reported when the chunk closes
        if self.rows_covered != stream_start - 1:
            raise RoutingMismatchError(
                f"turn {index}: the chunk starting at turn {self.first_turn} has rows for positions "
                f"[0, {self.rows_covered}) but {stream_start - 1} are needed before a repaired boundary (gap)"
            )
        need = context_start - 1
        if start > need:
            raise RoutingMismatchError(
                f"turn {index}: routed_experts_start_len = {start} but the repaired boundary needs the rows "
                f"of this turn from position {need} (gap); request start_len <= {need} or 0 "
                "(t1_tito.routing_start_len)"
            )
        rows = r[need - start :]
        self.routing_parts.append(rows)
        self.has_routing = True
        self.rows_covered = stream_start - 1 + rows.shape[0]


@dataclass
class _Tally:
    """Boundary-case counts of one `stitch` call (copied into its `DriftAudit`)."""

    strict_boundaries: int = 0
    normalized_boundaries: int = 0
    retokenized_boundaries: int = 0
    splits: int = 0
    forced_splits: int = 0
    retokenized_context_tokens: int = 0
    dropped_context_tokens: int = 0
    affected_loss_tokens: int = 0


def _classify(
    turn_index: int,
    prev: tuple[np.ndarray, np.ndarray],
    prompt: np.ndarray,
    level: int,
    max_s: int,
    max_u: int,
    tokenizer: Tokenizer | None,
    same_start: bool | None = None,
) -> BoundaryCase:
    """Try the cases in order up to ``level`` (0 strict, 1 normalized, 2 retokenized); else a split."""
    p, a = prev
    if strict_prefix(p, a, prompt, same_start=same_start):
        return BoundaryCase(turn_index, "strict", context_start=p.shape[0] + a.shape[0])
    if level >= 1:
        drop = normalized_drop(p, a, prompt, max_s=max_s, max_u=max_u, tokenizer=tokenizer)
        if drop is not None:
            s, u, c = drop
            return BoundaryCase(turn_index, "normalized", context_start=c, s=s, u=u)
    if level >= 2 and tokenizer is not None:  # always given from level 1 on
        span = retokenized_span(p, a, prompt, max_s=max_s, tokenizer=tokenizer)
        if span is not None:
            b, e, s = span
            core = differing_core(a, prompt[b:e])
            return BoundaryCase(
                turn_index, "retokenized", context_start=e, s=s, copy_start=b, retokenized_ids=core
            )
    return BoundaryCase(turn_index, "split")


def _repair_level(
    repair: str, max_s: int | None, max_u: int | None, tokenizer: Tokenizer | None
) -> tuple[int, int, int]:
    if repair not in REPAIR_MODES:
        raise ValueError(f"unknown repair mode {repair!r}; expected one of {REPAIR_MODES}")
    level = REPAIR_MODES.index(repair)
    if level == 0:
        return 0, 0, 0
    for name, value in (("normalize_max_s", max_s), ("normalize_max_u", max_u)):
        if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 0:
            raise ValueError(
                f"repair {repair!r} needs {name} as an integer >= 0 (tito.{name}), got {value!r}"
            )
    if tokenizer is None:
        raise ValueError(
            f"repair {repair!r} needs the tokenizer the prompts were encoded with: pass tokenizer="
        )
    return level, int(max_s), int(max_u)  # type: ignore[arg-type]


def _turn_arrays(turn: Turn, where: str, *, check_output: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A turn's prompt (type checked only), output (range checked if asked) and log-probs, as arrays."""
    prompt = as_id_array(turn.prompt_ids, f"{where}: prompt_ids")
    output = as_id_array(turn.output_ids, f"{where}: output_ids")
    if check_output:
        check_id_range(output, f"{where}: output_ids")
    if prompt.shape[0] == 0:
        raise StreamMisalignmentError(f"{where}: empty prompt_ids")
    logprobs = check_logprobs(turn.output_logprobs, f"{where}: output_logprobs")
    if logprobs.shape[0] != output.shape[0]:
        raise StreamMisalignmentError(
            f"{where}: {output.shape[0]} output ids but {logprobs.shape[0]} log-probs"
        )
    start = check_start_len(turn.routed_experts_start_len, where=where)
    r = turn.routed_experts
    if r is not None:
        if not isinstance(r, np.ndarray):
            raise TypeError(f"{where}: routed_experts must be a numpy array or None, got {type(r).__name__}")
        n = prompt.shape[0] + output.shape[0]
        check_routing(r, num_tokens=n, start_len=start, where=f"{where}: routed_experts")
    return prompt, output, logprobs


def stitch(
    turns: Sequence[Turn],
    *,
    reward: float,
    task_id: str,
    family: str,
    trial_id: str,
    repair: str = "strict",
    normalize_max_s: int | None = None,
    normalize_max_u: int | None = None,
    tokenizer: Tokenizer | None = None,
) -> StitchResult:
    """Stitch a trial's turns into samples with four aligned streams (T1 §4.1, Eqs. 6-8; T1 §5.2 reward).

    Turn i contributes T_i = p_i || a_i. At each boundary the cases are tried in order, up to ``repair``:

    1. strict: T_i is a bit-exact prefix of p_(i+1); the new context is ``p_(i+1)[len(T_i):]``.
    2. normalized: the smallest (s, u) in [0, normalize_max_s] x [0, normalize_max_u] (least s + u) such
       that dropping the last s ids of p_i and the last u of a_i leaves a prefix of p_(i+1)
       (`normalized_drop`); the new context starts after that prefix, or with u > 0 after the harness's
       version of the dropped tail, which ends at the turn's ``<|im_end|>`` (kept as context glue only when
       a_i did not sample one); a tail whose end cannot be found there is no drop.
    3. retokenized: p_(i+1) holds a re-encoded copy ã_i = p_(i+1)[b:e] of a_i with the same bytes, found by
       offset mapping (`retokenized_span`); the new context is ``p_(i+1)[e:]``.
    4. split: a new chunk under the same trial, its first prompt all context.

    In every case the sampled a_i stays in the stream with mask 1 and the sampler's log-probs, and ids that
    replaced it in p_(i+1) never enter the stream: the new context (observation, template glue) follows with
    mask 0 and log-prob 0, then a_(i+1). After a repaired boundary the later turns of the chunk are trained on
    the sampled ids where inference saw the harness's version; the audit counts those ids
    (``retokenized_context_tokens``, ``dropped_context_tokens``) and the loss tokens so conditioned
    (``affected_loss_tokens``). A turn with ``starts_chunk`` always begins a new chunk (a forced split,
    counted apart). Sampled ids are never re-encoded.

    Cost: linear in tokens plus one vectorised prefix comparison per boundary. 1-D integer numpy arrays are
    taken as they are (lists are converted, one C-level pass each); each prompt is compared with T_i and only
    the ids it adds are range-checked, since the rest equal ids checked before.

    Routing rows: a turn supplies the rows of the stream positions it adds, from its own position c - 1 (c the
    context start) on. Within a chunk whose boundaries were all strict, a turn's rows are appended when its
    ``routed_experts_start_len`` equals the rows covered so far, and a record with start_len 0 supersedes
    them. After a repaired boundary the turn's start_len must be at most c - 1 (0 always works; see
    `routing_start_len`) and the rows before c - 1 are left out; the row placed at the last sampled id of
    a_i is the one inference computed at position c - 1. Each chunk ends with T - 1 rows.

    Reward: one scalar on the last sampled token of each chunk (T1 §5.2). Policy version: the oldest version
    among the chunk's turns, with ``policy_versions_mixed`` set when they differ.

    Args:
        turns: The trial's turns in order.
        reward: The trial's scalar reward (finite; an infrastructure failure must not reach here as 0).
        task_id: Task identifier, copied to every sample.
        family: Task family, copied to every sample.
        trial_id: Trial identifier, copied to every sample.
        repair: The most permissive case tried before a split: ``strict``, ``normalized`` or ``retokenized``
            (``tito.repair``).
        normalize_max_s: Bound on s (``tito.normalize_max_s``); required unless ``repair`` is strict.
        normalize_max_u: Bound on u (``tito.normalize_max_u``); required unless ``repair`` is strict.
        tokenizer: The tokenizer the prompts were encoded with; required unless ``repair`` is ``strict``.

    Returns:
        `StitchResult` with one validated `Sample` per non-empty chunk, the boundary cases and the
        `DriftAudit` (loss-region drift recounted by `audit_drift`).

    Raises:
        ValueError: unknown ``repair``, a missing bound or tokenizer for it, or a non-finite ``reward``.
        TypeError: ids, log-probs or routing of the wrong type.
        InvalidTurnError: an id or log-prob out of range.
        StreamMisalignmentError: a turn's output and log-prob counts differ, an empty prompt, or a built
            sample breaks the invariant.
        RoutingMismatchError: a bad start_len (`t1_r3.check_start_len`), a turn's routing rows do not match
            its tokens, or turns' rows do not tile a chunk (gap, overlap, missing record, different [L, k]).
    """
    level, max_s, max_u = _repair_level(repair, normalize_max_s, normalize_max_u, tokenizer)
    if not math.isfinite(reward):
        raise ValueError(f"reward must be finite, got {reward}")

    chunks: list[_Chunk] = []
    tally = _Tally()
    cases: list[BoundaryCase] = []
    prev: tuple[np.ndarray, np.ndarray] | None = None
    repaired = False  # a repaired boundary earlier in the current chunk
    prev_start = None
    for i, turn in enumerate(turns):
        where = f"turn {i}"
        # strict-only stitching range-checks each chunk's ids in one pass when it closes (`_chunk_ids`);
        # the repairs read ids through the tokenizer, so there every turn's ids are checked first
        prompt, output, logprobs = _turn_arrays(turn, where, check_output=level > 0)
        start = data_start(prompt)  # taken once per prompt: consecutive buffer views share their start
        case = None
        if prev is not None:
            if turn.starts_chunk:
                case = BoundaryCase(i, "forced_split")
            else:
                case = _classify(i, prev, prompt, level, max_s, max_u, tokenizer, start == prev_start)
            cases.append(case)
        if case is None or case.kind in ("split", "forced_split"):
            if case is not None:
                if case.kind == "split":
                    tally.splits += 1
                else:
                    tally.forced_splits += 1
            if level > 0:
                check_id_range(prompt, f"{where}: prompt_ids")
            chunks.append(_Chunk(first_turn=i))
            repaired = False
            context_start = 0
        else:
            context_start = case.context_start
            if level > 0:
                check_id_range(prompt[context_start:], f"{where}: prompt_ids")
            if case.kind == "strict":
                tally.strict_boundaries += 1
            else:
                repaired = True
                chunks[-1].aligned = False
                if case.kind == "normalized":
                    tally.normalized_boundaries += 1
                    tally.dropped_context_tokens += case.s + case.u
                else:
                    tally.retokenized_boundaries += 1
                    tally.dropped_context_tokens += case.s
                    tally.retokenized_context_tokens += case.retokenized_ids
        chunk = chunks[-1]
        if repaired:
            tally.affected_loss_tokens += output.shape[0]
        stream_start = chunk.length
        chunk.append(prompt[context_start:], output, logprobs, where)
        chunk.add_routing(turn, i, context_start, stream_start)
        chunk.versions.append(turn.policy_version)
        prev, prev_start = (prompt, output), start

    samples: list[Sample] = []
    dropped = 0
    for chunk in chunks:
        sample = _close(chunk, len(samples), reward, task_id, family, trial_id)
        if sample is None:
            dropped += 1
        else:
            samples.append(sample)

    audit = audit_drift(turns, samples, splits=tally.splits, dropped_empty_chunks=dropped)
    counts = dataclasses.asdict(tally)
    audit = dataclasses.replace(audit, **counts)
    return StitchResult(
        samples=samples,
        chunks_split=tally.splits + tally.forced_splits,
        audit=audit,
        boundaries=tuple(cases),
    )


def _chunk_ids(chunk: _Chunk) -> np.ndarray:
    """The chunk's ids as int32 ``[length]``, every one checked in ``[0, MAX_TOKEN_ID]`` first.

    One reduction over the whole chunk when its parts share a signed dtype (viewed unsigned, a negative id
    is above the bound too); otherwise, or when an id is out of range, part by part, so the error names the
    turn and stream (`check_id_range`).

    Raises:
        InvalidTurnError: an id < 0 or > ``MAX_TOKEN_ID``.
    """
    parts = chunk.token_parts
    dtype = parts[0].dtype
    if dtype.kind == "i" and dtype.itemsize >= 4 and all(p.dtype == dtype for p in parts):
        ids = np.concatenate(parts)
        if ids.view(f"u{dtype.itemsize}").max() <= MAX_TOKEN_ID:
            return ids.astype(np.int32, copy=False)
    for part, where in zip(parts, chunk.part_where, strict=True):
        check_id_range(part, where)
    return np.concatenate(parts, dtype=np.int32, casting="unsafe")  # ids range-checked


def _close(
    chunk: _Chunk, index: int, reward: float, task_id: str, family: str, trial_id: str
) -> Sample | None:
    """Build and validate the chunk's `Sample`; None for a chunk without any sampled token."""
    if not chunk.loss_spans:
        return None
    if chunk.missing_turn is not None:
        raise RoutingMismatchError(
            f"turn {chunk.missing_turn}: no routed_experts while earlier turns of the chunk starting at "
            f"turn {chunk.first_turn} have them, and no later full-sequence record covers it (R3)"
        )
    tokens = _chunk_ids(chunk)
    mask = np.zeros(chunk.length, dtype=np.int8)
    logprobs = np.zeros(chunk.length, dtype=np.float32)
    for start, lp in chunk.loss_spans:
        mask[start : start + lp.shape[0]] = 1
        logprobs[start : start + lp.shape[0]] = lp
    routing = None
    if chunk.has_routing:
        parts = chunk.routing_parts
        # the record keeps its compact dtype (uint8 for E <= 256, T1 §4.2); only mixed parts are widened
        routing = np.concatenate(parts, axis=0) if len(parts) > 1 else parts[0]
        if routing.dtype not in ROUTING_DTYPES:  # e.g. int64 from torch: the stream's int32
            routing = routing.astype(np.int32)
        check_routing(routing, num_tokens=chunk.length, where=f"chunk starting at turn {chunk.first_turn}")
    last_start, last_lp = chunk.loss_spans[-1]
    sample = Sample(
        token_ids=tokens,
        loss_mask=mask,
        rollout_logprobs=logprobs,
        routing=routing,
        reward=float(reward),
        reward_index=last_start + last_lp.shape[0] - 1,
        task_id=task_id,
        family=family,
        trial_id=trial_id,
        chunk_index=index,
        policy_version=min(chunk.versions),
        policy_versions_mixed=len(set(chunk.versions)) > 1,
    )
    sample.validate()
    return sample
