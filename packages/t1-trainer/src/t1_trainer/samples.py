"""What the trainer reads from a TITO sample, and the checks it makes before training on one."""

from __future__ import annotations

import numpy as np
import torch

from t1_tito import Sample
from t1_trainer.errors import SampleError

__all__ = [
    "TrainSample",
    "check_sample",
    "loss_mask_tensor",
    "reward_stream",
    "routing_array",
    "sample_name",
    "token_tensor",
]


TrainSample = Sample
"""What the trainer trains on: `t1_tito.Sample` itself, the chunk the TITO stitcher built (T1 §4.1).

The name stays for the trainer's signatures; the fields it reads are ``token_ids`` (int32 ``[T]``),
``loss_mask`` (int8 ``[T]``), ``rollout_logprobs`` (float32 ``[T]``, 0 where masked), ``routing`` (``[T-1, L,
k]`` or None), ``reward`` at ``reward_index``, ``task_id``, ``trial_id``, ``chunk_index``,
``policy_version`` and ``policy_versions_mixed``."""


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


def token_tensor(sample: TrainSample, device: torch.device) -> torch.Tensor:
    """The sample's ``token_ids`` as int64 ``[T]`` on ``device`` (a model's input)."""
    return torch.as_tensor(np.asarray(sample.token_ids), dtype=torch.long, device=device)


def loss_mask_tensor(sample: TrainSample, device: torch.device) -> torch.Tensor:
    """The sample's ``loss_mask`` as float32 ``[T]`` on ``device``, 1.0 on loss tokens."""
    return torch.as_tensor(np.asarray(sample.loss_mask), device=device).to(torch.float32)


def routing_array(routing: np.ndarray | torch.Tensor) -> np.ndarray:
    """A routing record ``[T-1, L, k]`` as a numpy array (a tensor is copied to the host)."""
    return routing.detach().cpu().numpy() if isinstance(routing, torch.Tensor) else np.asarray(routing)
