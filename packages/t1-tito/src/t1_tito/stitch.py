"""Stitch a trial's turns into training samples, strict TITO case, and audit loss-region drift (T1 §4.1)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields

import numpy as np

from t1_r3 import RoutingMismatchError, check_routing
from t1_tito.sample import Sample, Turn

#: Boundary repair modes of T1 §4.1 (002 summary, "Boundary repair cases"), strongest first.
REPAIR_MODES = ("strict", "normalized", "retokenized")


@dataclass(frozen=True)
class DriftAudit:
    """Token-fidelity audit of one stitched trial (T1 §4.1; the paper measures 0.0000% loss-region drift).

    Attributes:
        loss_tokens: Loss-region (m = 1) positions over all samples.
        drifted_loss_tokens: Loss-region positions whose stitched id differs from the id the sampler emitted,
            plus any sampled token missing from, or extra in, the loss region. Computed by `audit_drift`,
            independently of the stitcher.
        retokenized_context_tokens: Context tokens taken from a re-tokenization rather than the sampled ids
            (always 0 in the strict case; the paper reports 2.6% in its audited run).
        chunks: Samples produced.
        splits: Boundaries where the strict prefix failed and a new chunk began.
        dropped_empty_chunks: Chunks without any sampled token (nothing to train on or to carry a reward).
    """

    loss_tokens: int
    drifted_loss_tokens: int
    retokenized_context_tokens: int
    chunks: int
    splits: int
    dropped_empty_chunks: int = 0

    @property
    def drift_rate(self) -> float:
        """Drifted / loss tokens (0.0 when there is no loss token)."""
        return self.drifted_loss_tokens / self.loss_tokens if self.loss_tokens else 0.0

    @classmethod
    def total(cls, audits: Sequence[DriftAudit]) -> DriftAudit:
        """Sum the counts of several audits (e.g. all trials of a step, for the per-step metrics)."""
        names = [f.name for f in fields(cls)]
        return cls(**{n: sum(getattr(a, n) for a in audits) for n in names})


@dataclass(frozen=True)
class StitchResult:
    """What `stitch` returns: the samples (one per chunk), the number of splits, and the drift audit."""

    samples: list[Sample]
    chunks_split: int
    audit: DriftAudit = field(repr=False)


@dataclass
class _Chunk:
    """Accumulates one chunk: streams as Python lists, routing rows as a list of arrays."""

    first_turn: int
    tokens: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    routing_parts: list[np.ndarray] = field(default_factory=list)
    rows_covered: int = 0
    has_routing: bool = False
    missing_turn: int | None = (
        None  # a turn without routing after routed ones; only a full record can heal it
    )
    versions: list[int] = field(default_factory=list)

    def add_routing(self, turn: Turn, index: int) -> None:
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


def _is_prefix(prefix: list[int], seq: list[int]) -> bool:
    return len(prefix) <= len(seq) and seq[: len(prefix)] == prefix


def stitch(
    turns: Sequence[Turn],
    *,
    reward: float,
    task_id: str,
    family: str,
    trial_id: str,
    repair: str = "strict",
) -> StitchResult:
    """Stitch a trial's turns into samples with four aligned streams (T1 §4.1, strict case; T1 §5.2 reward).

    Turn i contributes T_i = p_i || a_i. While T_i is a bit-exact prefix of p_{i+1}, turn i+1 extends the
    current chunk: the new context tokens ``p_{i+1}[len(T_i):]`` (observation, template glue) enter with mask
    0 and log-prob 0, the sampled ``a_{i+1}`` with mask 1 and the sampler's log-probs. Any other boundary
    closes the chunk and starts a new one under the same trial (the "split" case), counted in
    ``chunks_split``. Sampled ids are never re-encoded.

    Routing rows: a turn's rows are appended when its ``routed_experts_start_len`` equals the rows the chunk
    covers so far; a turn with start_len 0 (full sequence) supersedes them. Each chunk ends with T - 1 rows.

    Reward: one scalar on the last sampled token of each chunk (T1 §5.2). Policy version: the oldest version
    among the chunk's turns, with ``policy_versions_mixed`` set when they differ.

    Args:
        turns: The trial's turns in order.
        reward: The trial's scalar reward (finite; an infrastructure failure must not reach here as 0).
        task_id: Task identifier, copied to every sample.
        family: Task family, copied to every sample.
        trial_id: Trial identifier, copied to every sample.
        repair: ``"strict"``. The normalized and retokenized boundary repairs are not built yet.

    Returns:
        `StitchResult` with one validated `Sample` per non-empty chunk and the `DriftAudit` from
        `audit_drift`.

    Raises:
        NotImplementedError: ``repair`` is ``"normalized"`` or ``"retokenized"`` (not built yet).
        ValueError: unknown ``repair`` or non-finite ``reward``.
        StreamMisalignmentError: a turn's output and log-prob counts differ, or a built sample breaks the
            invariant.
        RoutingMismatchError: a turn's routing rows do not match its tokens, or turns' rows do not tile a
            chunk (gap, overlap, missing record, different [L, k]).
    """
    if repair in ("normalized", "retokenized"):
        raise NotImplementedError(
            f"TITO {repair} boundary repair not built yet: only the strict case (else split) exists"
        )
    if repair != "strict":
        raise ValueError(f"unknown repair mode {repair!r}; expected one of {REPAIR_MODES}")
    if not math.isfinite(reward):
        raise ValueError(f"reward must be finite, got {reward}")

    chunks: list[_Chunk] = []
    splits = 0
    for i, turn in enumerate(turns):
        turn.validate(f"turn {i}")
        prompt, output = list(turn.prompt_ids), list(turn.output_ids)
        chunk = chunks[-1] if chunks else None
        if chunk is not None and _is_prefix(chunk.tokens, prompt):
            context = prompt[len(chunk.tokens) :]
        else:
            if chunk is not None:
                splits += 1
            chunk = _Chunk(first_turn=i)
            chunks.append(chunk)
            context = prompt
        chunk.tokens += context + output
        chunk.mask += [0] * len(context) + [1] * len(output)
        chunk.logprobs += [0.0] * len(context) + [float(x) for x in turn.output_logprobs]
        chunk.add_routing(turn, i)
        chunk.versions.append(turn.policy_version)

    samples: list[Sample] = []
    dropped = 0
    for chunk in chunks:
        if 1 not in chunk.mask:
            dropped += 1
            continue
        routing = None
        if chunk.missing_turn is not None:
            raise RoutingMismatchError(
                f"turn {chunk.missing_turn}: no routed_experts while earlier turns of the chunk starting at "
                f"turn {chunk.first_turn} have them, and no later full-sequence record covers it (R3)"
            )
        if chunk.has_routing:
            routing = np.concatenate(chunk.routing_parts, axis=0).astype(np.int32, copy=False)
            check_routing(
                routing, num_tokens=len(chunk.tokens), where=f"chunk starting at turn {chunk.first_turn}"
            )
        mask = np.asarray(chunk.mask, dtype=np.int8)
        sample = Sample(
            token_ids=np.asarray(chunk.tokens, dtype=np.int32),
            loss_mask=mask,
            rollout_logprobs=np.asarray(chunk.logprobs, dtype=np.float32),
            routing=routing,
            reward=float(reward),
            reward_index=int(np.flatnonzero(mask)[-1]),
            task_id=task_id,
            family=family,
            trial_id=trial_id,
            chunk_index=len(samples),
            policy_version=min(chunk.versions),
            policy_versions_mixed=len(set(chunk.versions)) > 1,
        )
        sample.validate()
        samples.append(sample)

    audit = audit_drift(turns, samples, splits=splits, dropped_empty_chunks=dropped)
    return StitchResult(samples=samples, chunks_split=splits, audit=audit)


def audit_drift(
    turns: Sequence[Turn], samples: Sequence[Sample], *, splits: int = 0, dropped_empty_chunks: int = 0
) -> DriftAudit:
    """Count loss-region drift by re-walking the turns, without trusting the stitcher (T1 §4.1).

    The loss region of the samples, read in sample order then position order, must reproduce exactly the
    sequence of ids the sampler emitted, turn after turn. Every position where the two sequences differ is
    drifted, and so is every sampled id missing from (or extra in) the loss region.

    Args:
        turns: The trial's turns, as given to `stitch`.
        samples: The stitched samples of that trial, in chunk order.
        splits: Split count to report.
        dropped_empty_chunks: Empty-chunk count to report.

    Returns:
        The `DriftAudit` (``retokenized_context_tokens`` is 0: only the strict case exists).
    """
    emitted = np.asarray([t for turn in turns for t in turn.output_ids], dtype=np.int64)
    parts = [s.token_ids[s.loss_mask == 1] for s in samples]
    stitched = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)
    n = min(emitted.size, stitched.size)
    drifted = int(np.count_nonzero(emitted[:n] != stitched[:n])) + abs(emitted.size - stitched.size)
    return DriftAudit(
        loss_tokens=int(stitched.size),
        drifted_loss_tokens=drifted,
        retokenized_context_tokens=0,
        chunks=len(samples),
        splits=splits,
        dropped_empty_chunks=dropped_empty_chunks,
    )
