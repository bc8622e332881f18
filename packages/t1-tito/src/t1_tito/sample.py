"""Turns as the sampler returned them and the stitched `Sample` with its four aligned streams (T1 §4.1)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class StreamMisalignmentError(ValueError):
    """The per-token streams of a turn or sample are not aligned (lengths, routing rows, masked log-probs)."""


class RoutingMismatchError(ValueError):
    """Routing rows of successive turns do not tile the chunk (gap, overlap, missing record, shape change).

    R3 replays recorded routing; a chunk whose routing cannot be assembled exactly must not be trained on
    (T1 §4.2: missing routing aborts the rollout).
    """


@dataclass(kw_only=True)
class Turn:
    """One generation call: the prompt the sampler saw and what it emitted (SGLang ``/generate`` shapes).

    Attributes:
        prompt_ids: p_i, the prompt token ids ``[len(p_i)]``.
        output_ids: a_i, the sampled token ids ``[len(a_i)]`` (the stop token included when emitted).
        output_logprobs: Sampler log-probabilities of ``output_ids`` ``[len(a_i)]`` (nats).
        routed_experts: int ``[rows, L, k]`` expert ids or None; rows cover positions
            ``[routed_experts_start_len, len(prompt_ids) + len(output_ids) - 1)`` (SGLang semantics: no row
            for the last sampled token, which was never fed back).
        routed_experts_start_len: First position the rows cover (0: the whole sequence).
        policy_version: Weight version that produced the turn.
        finish_reason: The sampler's reason (``"stop"``, ``"length"``, ...).
    """

    prompt_ids: list[int]
    output_ids: list[int]
    output_logprobs: list[float]
    policy_version: int
    finish_reason: str
    routed_experts: np.ndarray | None = None
    routed_experts_start_len: int = 0

    def validate(self, where: str = "turn") -> None:
        """Check the turn's own alignment.

        Raises:
            StreamMisalignmentError: log-prob count differs from output count, or empty prompt.
            RoutingMismatchError: routing not ``[rows, L, k]`` integer with the rows SGLang semantics give.
        """
        if not self.prompt_ids:
            raise StreamMisalignmentError(f"{where}: empty prompt_ids")
        if len(self.output_logprobs) != len(self.output_ids):
            raise StreamMisalignmentError(
                f"{where}: {len(self.output_ids)} output ids but {len(self.output_logprobs)} log-probs"
            )
        if self.routed_experts is None:
            return
        r = self.routed_experts
        if r.ndim != 3 or not np.issubdtype(r.dtype, np.integer):
            raise RoutingMismatchError(
                f"{where}: routed_experts must be integer [rows, L, k], got {r.dtype} {r.shape}"
            )
        expected = len(self.prompt_ids) + len(self.output_ids) - 1 - self.routed_experts_start_len
        if self.routed_experts_start_len < 0 or r.shape[0] != expected:
            raise RoutingMismatchError(
                f"{where}: routed_experts has {r.shape[0]} rows, expected len(prompt)+len(output)-1-start_len"
                f" = {len(self.prompt_ids)}+{len(self.output_ids)}-1-{self.routed_experts_start_len}"
                f" = {expected}"
            )


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
        routing: int32 ``[T-1, L, k]`` or None (no routing recorded, e.g. a dense model).
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
        if not np.isin(self.loss_mask, (0, 1)).all():
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
            if r.dtype != np.int32 or r.ndim != 3 or r.shape[0] != t - 1:
                raise StreamMisalignmentError(
                    f"{where}: routing must be int32 [T-1={t - 1}, L, k], got {r.dtype} {r.shape}"
                )
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
