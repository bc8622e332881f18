"""Token-fidelity audit of a stitched trial: boundary cases, loss-region drift, re-tokenized context.

What T1 §4.1 measures per sample: 0.0000% loss-region drift, 2.6% re-tokenized context.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np

from t1_tito.sample import Sample, Turn

__all__ = ["DriftAudit", "audit_drift"]


@dataclass(frozen=True)
class DriftAudit:
    """Token-fidelity audit of one stitched trial, or the sum over many (T1 §4.1).

    The paper measures 0.0000% loss-region drift on 1,402 samples, and 2.6% of tokens on which later turns
    were trained with sampled ids where inference had seen the harness's re-tokenization. Every field is a
    count, so `total` sums them.

    Attributes:
        loss_tokens: Loss-region (m = 1) positions over all samples.
        drifted_loss_tokens: Loss-region positions whose stitched id differs from the id the sampler emitted,
            plus any sampled token missing from, or extra in, the loss region. Computed by `audit_drift`,
            independently of the stitcher; must be 0.
        retokenized_context_tokens: Stream positions holding sampled ids where the inference of later turns
            saw a re-tokenized copy instead: at each retokenized boundary, the ids of a_i left once the common
            prefix and suffix of a_i and its copy are trimmed (the paper's 2.6%, as a count).
        chunks: Samples produced.
        splits: Boundaries no enabled case could repair, where a new chunk began (the fourth case).
        dropped_empty_chunks: Chunks without any sampled token (nothing to train on or to carry a reward).
        total_tokens: Stream positions over all samples (the denominator of the fractions).
        strict_boundaries: Boundaries where T_i was a bit-exact prefix of p_(i+1).
        normalized_boundaries: Boundaries repaired by dropping (s, u) ids of the tails of p_i and a_i.
        retokenized_boundaries: Boundaries repaired by locating the re-tokenized copy of a_i.
        forced_splits: New chunks begun because the turn asked for one (``Turn.starts_chunk``, e.g. after a
            context-compaction summary), not because the boundary failed.
        dropped_context_tokens: Stream ids that the inference of later turns did not see because a repair
            dropped them: s + u at each normalized boundary, s (the prompt tail) at each retokenized one.
        affected_loss_tokens: Loss tokens of turns after a repaired boundary in their chunk: sampled ids
            exact, but trained on a context that differs from the one inference conditioned on.
    """

    loss_tokens: int
    drifted_loss_tokens: int
    retokenized_context_tokens: int
    chunks: int
    splits: int
    dropped_empty_chunks: int = 0
    total_tokens: int = 0
    strict_boundaries: int = 0
    normalized_boundaries: int = 0
    retokenized_boundaries: int = 0
    forced_splits: int = 0
    dropped_context_tokens: int = 0
    affected_loss_tokens: int = 0

    @property
    def drift_rate(self) -> float:
        """Drifted / loss tokens (0.0 when there is no loss token)."""
        return self.drifted_loss_tokens / self.loss_tokens if self.loss_tokens else 0.0

    @property
    def retokenized_context_fraction(self) -> float:
        """Re-tokenized context / stream tokens (0.0 when there is no token); the paper reports 0.026."""
        return self.retokenized_context_tokens / self.total_tokens if self.total_tokens else 0.0

    @property
    def case_counts(self) -> dict[str, int]:
        """Boundaries per case: ``strict``, ``normalized``, ``retokenized``, ``split``, ``forced_split``."""
        return {
            "strict": self.strict_boundaries,
            "normalized": self.normalized_boundaries,
            "retokenized": self.retokenized_boundaries,
            "split": self.splits,
            "forced_split": self.forced_splits,
        }

    @classmethod
    def total(cls, audits: Sequence[DriftAudit]) -> DriftAudit:
        """Sum the counts of several audits (e.g. all trials of a step, for the per-step metrics)."""
        names = [f.name for f in fields(cls)]
        return cls(**{n: sum(getattr(a, n) for a in audits) for n in names})


def audit_drift(
    turns: Sequence[Turn], samples: Sequence[Sample], *, splits: int = 0, dropped_empty_chunks: int = 0
) -> DriftAudit:
    """Count loss-region drift by re-walking the turns, without trusting the stitcher (T1 §4.1).

    The loss region of the samples, read in sample order then position order, must reproduce exactly the
    sequence of ids the sampler emitted, turn after turn. Every position where the two sequences differ is
    drifted, and so is every sampled id missing from (or extra in) the loss region. Linear in tokens.

    Args:
        turns: The trial's turns, as given to `stitch`.
        samples: The stitched samples of that trial, in chunk order.
        splits: Split count to report.
        dropped_empty_chunks: Empty-chunk count to report.

    Returns:
        The `DriftAudit` with the loss, drift, chunk and stream-token counts; the boundary-case fields are 0
        here (`stitch` fills them in from its own walk).
    """
    emitted_parts = [np.asarray(t.output_ids, dtype=np.int64) for t in turns]
    emitted = np.concatenate(emitted_parts) if emitted_parts else np.zeros(0, dtype=np.int64)
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
        total_tokens=sum(s.num_tokens for s in samples),
    )
