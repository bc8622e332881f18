"""Retention of a rollout batch by task family, trajectory length and reward (T1 §7.4, §10).

Oversampling admits the first trials to finish and cancels the rest, so the trials that reach the optimizer
are not a uniform sample of those launched: the cancelled tail concentrates the hardest families and the
longest trajectories (T1 §10). A table here counts a batch's trials by outcome in each bucket of one grouping,
and the fraction of each bucket's launched trials that was kept.

Outcomes (`OUTCOMES`): ``kept`` (admitted, trained on), ``finished_late`` (finished after the batch was full),
``cancelled`` (the straggler tail, and unfinished siblings of a failed group member), ``failed`` (an
infrastructure or harness failure, with its cause), ``dropped`` (finished, but its group lost a member) and
``continued`` (carried to the next step by partial-rollout continuation, T1 §10, `t1_rollout.continuation`:
parked at a turn boundary, or finished after the batch was full and carried as a finished record). A trial
continued into a later step is counted again there, under the outcome it has in that step, so the tables of
consecutive steps show which parked trials were kept and which were cancelled after ``max_resumes``.

Groupings:

- task family: the trial's ``family`` (the task's category);
- turns: the agent turns of the episode (`t1_rollout.harness.Episode.agent_turns`, summary turns left out),
  in power-of-two buckets (`length_bucket`);
- tokens: the tokens the policy sampled over the episode (every turn's ``output_ids``, summary turns
  included), in power-of-two buckets;
- reward: the trial's scalar reward (`REWARD_EDGES`). Only finished trials have one (kept, finished late,
  dropped); a cancelled or failed trial has none and is counted in the ``unscored`` row, never as a reward
  of 0 (an unfinished trial is not the agent's 0, T1 §5).

A cancelled trial's length is the length it had reached when it was cancelled: `t1_rollout.trial.run_trial`
fills the scheduler's record in place, so the partial episode survives the cancellation; a trial cancelled
before its sandbox started has no episode and counts 0 turns and 0 tokens. A parked trial counts at the
length it had reached when it parked, and a continued one at its whole length (every step it ran in).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from t1_rollout.trial import TrialRecord

OUTCOMES = ("kept", "finished_late", "cancelled", "failed", "dropped", "continued")
"""Trial outcomes of one batch, in the order every table row lists them (``continued`` last: it is 0 in every
row of a run without continuation)."""

REWARD_EDGES = (0.25, 0.5, 0.75, 1.0)
"""Upper edges of the reward buckets above 0: ``0``, ``(0, 0.25]``, ..., ``(0.75, 1]``, then ``>1`` (a dense
reward P / S exceeds 1 when more than S = 20 assertions pass, T1 §5.2), then ``unscored``."""

UNSCORED = "unscored"
"""The reward row of trials without a reward: cancelled, failed and parked ones."""

REWARD_BUCKETS = (
    "0",
    *(f"{lo:g}-{hi:g}" for lo, hi in zip((0.0, *REWARD_EDGES[:-1]), REWARD_EDGES, strict=True)),
    f">{REWARD_EDGES[-1]:g}",
    UNSCORED,
)
"""Every reward bucket label, in ascending order: ``0``, ``0-0.25``, ..., ``0.75-1``, ``>1``, ``unscored``."""

Table = dict[str, dict[str, int | float]]
"""``{bucket: {"launched": n, <outcome>: n for each of OUTCOMES, "retention": kept / launched}}``."""


def length_bucket(n: int) -> str:
    """The power-of-two bucket of a length: ``"0"``, ``"1"``, ``"2-3"``, ``"4-7"``, ``"8-15"``, ...

    Args:
        n: a count (turns or tokens), >= 0.

    Returns:
        ``"0"`` for 0, ``"1"`` for 1, else ``"<lo>-<hi>"`` with ``lo = 2**floor(log2 n)`` and
        ``hi = 2 lo - 1``.

    Raises:
        ValueError: a negative count.
    """
    if n < 0:
        raise ValueError(f"a trajectory length is a count >= 0, got {n}")
    if n < 2:
        return str(n)
    lo = 1 << (n.bit_length() - 1)
    return f"{lo}-{2 * lo - 1}"


def reward_bucket(value: float | None) -> str:
    """The reward bucket of a scalar reward (`REWARD_EDGES`); None (no reward) is ``unscored``.

    Raises:
        ValueError: a reward that is negative or not finite (no T1 reward formula yields one).
    """
    if value is None:
        return UNSCORED
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"a T1 reward is a finite number >= 0, got {value}")
    if value == 0:
        return REWARD_BUCKETS[0]
    for i, hi in enumerate(REWARD_EDGES):
        if value <= hi:
            return REWARD_BUCKETS[1 + i]
    return REWARD_BUCKETS[-2]


def trial_turns(record: TrialRecord) -> int:
    """Agent turns the trial ran (reached when cancelled); 0 without an episode."""
    return record.episode.agent_turns if record.episode else 0


def trial_tokens(record: TrialRecord) -> int:
    """Tokens the policy sampled over the trial's episode (reached when cancelled); 0 without an episode."""
    return sum(len(t.output_ids) for t in record.episode.turns) if record.episode else 0


def trial_reward_bucket(record: TrialRecord) -> str:
    """The reward bucket of a trial: its reward's value, or ``unscored`` when it has none."""
    return reward_bucket(record.reward.value if record.reward else None)


def _length_order(bucket: str) -> int:
    return int(bucket.split("-", 1)[0])


def retention_table(
    outcomes: Iterable[tuple[str, TrialRecord]],
    key: Callable[[TrialRecord], str],
    order: Callable[[str], object] | None = None,
) -> Table:
    """Count trials by outcome in each bucket of ``key``, with the kept fraction of each bucket.

    Args:
        outcomes: ``(outcome, record)`` pairs, one per launched trial, outcome one of `OUTCOMES`.
        key: the bucket of a record (e.g. `length_bucket` of `trial_turns`).
        order: sort key of the bucket labels (alphabetical when None).

    Returns:
        A `Table`, buckets in ``order``; every row lists every outcome (0 when none) and ``retention`` =
        kept / launched in the bucket.

    Raises:
        ValueError: an outcome not in `OUTCOMES`.
    """
    rows: Table = {}
    for outcome, record in outcomes:
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown trial outcome {outcome!r}; expected one of {', '.join(OUTCOMES)}")
        row = rows.setdefault(key(record), {"launched": 0, **dict.fromkeys(OUTCOMES, 0)})
        row["launched"] += 1
        row[outcome] += 1
    for row in rows.values():
        row["retention"] = row["kept"] / row["launched"]
    return {b: rows[b] for b in sorted(rows, key=order)}


def retention_tables(outcomes: Iterable[tuple[str, TrialRecord]]) -> dict[str, Table]:
    """The four retention tables of a batch, keyed as in `t1_rollout.scheduler.BatchResult.metrics`.

    Returns:
        ``retention_by_family_outcome`` (by task family), ``retention_by_turns`` and ``retention_by_tokens``
        (power-of-two length buckets, ascending) and ``retention_by_reward`` (reward buckets, ascending, then
        ``unscored``).
    """
    pairs = list(outcomes)
    return {
        "retention_by_family_outcome": retention_table(pairs, lambda r: r.family),
        "retention_by_turns": retention_table(
            pairs, lambda r: length_bucket(trial_turns(r)), order=_length_order
        ),
        "retention_by_tokens": retention_table(
            pairs, lambda r: length_bucket(trial_tokens(r)), order=_length_order
        ),
        "retention_by_reward": retention_table(pairs, trial_reward_bucket, order=REWARD_BUCKETS.index),
    }
