"""What the trainer reads from a TITO sample, and the checks it makes before training on one."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import torch

from t1_trainer.errors import SampleError

__all__ = ["TrainSample", "check_sample", "reward_stream", "sample_name"]


class TrainSample(Protocol):
    """The fields of `t1_tito.Sample` the trainer uses (any object with them works).

    Attributes:
        token_ids: int32 ``[T]``, the stitched token stream.
        loss_mask: int8 ``[T]``, 1 only on sampled tokens.
        rollout_logprobs: float32 ``[T]``, the sampler's log-prob of token j at position j (0 where masked).
        routing: int32 ``[T-1, L, k]`` routed experts (row i: the forward that consumed token i), or None.
        reward: scalar reward of the trajectory (T1 Eq. 20), placed at ``reward_index``.
        reward_index: position of the last sampled token, where the reward sits.
        task_id: task of the trial (GRPO groups by it).
        trial_id: trial the sample came from.
        chunk_index: chunk of the trial (TITO splits a trial into chunks when the prefix breaks).
        policy_version: weight version that sampled it (of a TITO chunk: the oldest of its turns).
    """

    token_ids: Any
    loss_mask: Any
    rollout_logprobs: Any
    routing: Any
    reward: float
    reward_index: int
    task_id: str
    trial_id: str
    chunk_index: int
    policy_version: int


def sample_name(sample: TrainSample) -> str:
    """``task/trial#chunk`` for error messages and metrics."""
    task = getattr(sample, "task_id", "?")
    trial = getattr(sample, "trial_id", "?")
    return f"{task}/{trial}#{getattr(sample, 'chunk_index', 0)}"


def check_sample(sample: TrainSample) -> int:
    """Checks the streams the trainer relies on (the pipeline's central invariant, DESIGN.md).

    Checks: ``token_ids``, ``loss_mask`` and ``rollout_logprobs`` are 1-D of one length T >= 2; position 0
    carries no loss (its token has no preceding state to score it from); ``reward_index`` is a loss token;
    masked positions carry rollout log-prob 0. Routing is checked separately (`TorchBackend.routing_errors`).

    Returns:
        T, the sample length in tokens.

    Raises:
        SampleError: naming the sample and the stream at fault.
    """
    name = sample_name(sample)
    ids = np.asarray(sample.token_ids)
    mask = np.asarray(sample.loss_mask)
    lp = np.asarray(sample.rollout_logprobs)
    if ids.ndim != 1 or ids.shape != mask.shape or ids.shape != lp.shape:
        raise SampleError(
            f"sample {name}: token_ids {ids.shape}, loss_mask {mask.shape}, rollout_logprobs {lp.shape} "
            "must be 1-D of one length"
        )
    n = int(ids.shape[0])
    if n < 2:
        raise SampleError(f"sample {name}: {n} tokens; a sample needs a prompt token and a sampled token")
    if mask[0]:
        raise SampleError(f"sample {name}: loss_mask[0] is 1; the first token has no state to be scored from")
    if not 0 <= int(sample.reward_index) < n or not mask[int(sample.reward_index)]:
        raise SampleError(
            f"sample {name}: reward_index {sample.reward_index} is not a loss token of the {n}-token stream; "
            "the reward belongs on the last sampled token"
        )
    if np.any(lp[mask == 0] != 0):
        raise SampleError(f"sample {name}: rollout_logprobs nonzero on masked positions (must be 0 there)")
    return n


def reward_stream(sample: TrainSample) -> torch.Tensor:
    """Per-token rewards ``[T]`` float32: the sample's reward at ``reward_index``, 0 elsewhere (T1 §5.2)."""
    r = torch.zeros(len(sample.token_ids), dtype=torch.float32)
    r[int(sample.reward_index)] = float(sample.reward)
    return r
