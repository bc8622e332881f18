"""Supervised fine-tuning of the actor on expert samples: cross-entropy on the loss-mask tokens only.

The warm start the paper's PPO begins from (T1 §6: the run is initialised from an SFT checkpoint). Samples are
the same TITO streams RL trains on (`t1_trainer.samples.TrainSample`): ``token_ids`` and ``loss_mask``, the
mask 1 on assistant tokens only, so prompts, observations and template glue are context, never targets.
Token j is scored by the state before it, through the same chunked LM-head path as the PPO actor
(`t1_trainer.logprobs.lm_head_logprobs`, temperature 1, the real-vocabulary limit), so the loss is exactly
``-mean log pi(T_j | T_<j)`` over the batch's loss tokens.

The learning rate rises linearly over the first ``warmup_fraction`` of the optimizer steps, then follows a
cosine from ``lr`` down to ``lr * min_lr_ratio`` (`sft_lr`): at a constant rate, a long fit of the tiny CPU
model on a handful of trajectories drifted back up after about 80 epochs.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from t1_spec import SftSpec
from t1_trainer.errors import NonFiniteUpdateError
from t1_trainer.logprobs import lm_head_logprobs
from t1_trainer.samples import TrainSample, check_sample

__all__ = ["SftEpoch", "save_actor", "sft_lr", "sft_token_logprobs", "train_sft"]


@dataclass(frozen=True)
class SftEpoch:
    """What one pass over the expert samples measured.

    Attributes:
        epoch: 1-based epoch number.
        loss: token-mean cross-entropy over the epoch's loss tokens, nats per token, at the weights each batch
            saw before its step (a training loss, not a held-out one).
        tokens: loss tokens trained on.
        token_accuracy: fraction of loss tokens that were the argmax of the model's distribution (teacher
            forced, before each batch's step).
        lr: learning rate of the epoch's last optimizer step.
        grad_norm: mean global gradient norm over the epoch's steps, before clipping.
        steps: optimizer steps taken so far (cumulative).
        time_s: wall time of the epoch, seconds.
    """

    epoch: int
    loss: float
    tokens: int
    token_accuracy: float
    lr: float
    grad_norm: float
    steps: int
    time_s: float

    def to_json(self) -> dict[str, Any]:
        """The epoch as one ``metrics.jsonl`` row (``phase: "sft"``)."""
        return {
            "phase": "sft",
            "epoch": self.epoch,
            "sft/loss": self.loss,
            "sft/tokens": self.tokens,
            "sft/token_accuracy": self.token_accuracy,
            "sft/lr": self.lr,
            "sft/grad_norm": self.grad_norm,
            "sft/steps": self.steps,
            "sft/time_s": self.time_s,
        }


def sft_lr(step: int, total_steps: int, spec: SftSpec) -> float:
    """The learning rate of optimizer step ``step`` (0-based) of ``total_steps``: linear warm-up, cosine.

    Warm-up covers ``w = ceil(warmup_fraction * total_steps)`` steps, step i of them at ``lr * (i + 1) / w``;
    the rest decay as ``lr_min + (lr - lr_min) * (1 + cos(pi * t)) / 2`` with ``t`` going from 0 at the first
    decay step to 1 at the last, ``lr_min = lr * min_lr_ratio``.

    Raises:
        ValueError: ``step`` outside ``[0, total_steps)``.
    """
    if not 0 <= step < total_steps:
        raise ValueError(f"step {step} is outside [0, {total_steps})")
    warm = math.ceil(spec.warmup_fraction * total_steps)
    if step < warm:
        return spec.lr * (step + 1) / warm
    decay = total_steps - warm
    t = (step - warm) / (decay - 1) if decay > 1 else 1.0
    low = spec.lr * spec.min_lr_ratio
    return low + (spec.lr - low) * 0.5 * (1.0 + math.cos(math.pi * t))


def sft_token_logprobs(model: nn.Module, sample: TrainSample, device: torch.device) -> torch.Tensor:
    """``log pi(T_j | T_<j)`` at the sample's loss positions, float32 ``[n_loss]``, with grad.

    Scored as the PPO actor scores (temperature 1, the real-vocabulary limit of `t1_policy.num_real_tokens`),
    with live routing (no record to replay: the tokens were not sampled by this model).
    """
    from t1_policy import num_real_tokens

    ids = torch.as_tensor(np.asarray(sample.token_ids), dtype=torch.long, device=device)
    pos = torch.nonzero(torch.as_tensor(np.asarray(sample.loss_mask), device=device)).flatten()
    hidden = model.model(input_ids=ids[None, :], use_cache=False).last_hidden_state[0]
    return lm_head_logprobs(
        hidden[pos - 1],
        model.lm_head.weight,
        ids[pos],
        temperature=1.0,
        vocab_limit=num_real_tokens(model.config.vocab_size),
    )


def _argmax_hits(model: nn.Module, sample: TrainSample, device: torch.device) -> int:
    """Loss tokens that are the model's argmax (no grad; one more forward on the loss positions only)."""
    ids = torch.as_tensor(np.asarray(sample.token_ids), dtype=torch.long, device=device)
    pos = torch.nonzero(torch.as_tensor(np.asarray(sample.loss_mask), device=device)).flatten()
    with torch.no_grad():
        hidden = model.model(input_ids=ids[None, :], use_cache=False).last_hidden_state[0]
        logits = model.lm_head(hidden[pos - 1]).float()
    return int((logits.argmax(-1) == ids[pos]).sum())


def train_sft(
    model: nn.Module,
    samples: Sequence[TrainSample],
    spec: SftSpec,
    *,
    seed: int,
    device: str = "cpu",
    on_epoch: Callable[[SftEpoch], None] | None = None,
    accuracy: bool = True,
) -> list[SftEpoch]:
    """Fit ``model`` to the expert samples by cross-entropy on their loss tokens (AdamW, warm-up, cosine).

    Each epoch visits every sample once in a fresh order drawn from ``(seed, epoch)``, in batches of
    ``spec.batch_size``; a batch's loss is the token mean over its loss tokens, its gradient clipped to
    ``spec.max_grad_norm`` before one AdamW step (matrices decayed by ``spec.weight_decay``, norms and 1-D
    gates not). The model is left in eval mode, trained in place.

    Args:
        model: the policy (`t1_policy.build_model`, or loaded from a checkpoint); its parameters are updated.
        samples: expert TITO samples (loss mask 1 on assistant tokens).
        spec: the recipe's ``sft`` section.
        seed: seeds the per-epoch order.
        device: torch device string.
        on_epoch: called with each epoch's metrics as it ends (e.g. to append ``metrics.jsonl``).
        accuracy: also measure the argmax token accuracy (one extra no-grad forward per sample).

    Returns:
        One `SftEpoch` per epoch.

    Raises:
        ValueError: no samples.
        SampleError: a sample's streams are inconsistent (`check_sample`).
        NonFiniteUpdateError: a non-finite loss or gradient norm (no step is taken).
    """
    if not samples:
        raise ValueError("train_sft: no expert samples to train on")
    for s in samples:
        check_sample(s)
    dev = torch.device(device)
    model.to(dev)
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    rest = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": spec.weight_decay}, {"params": rest, "weight_decay": 0.0}],
        lr=spec.lr,
        betas=spec.adam_betas,
    )
    per_epoch = math.ceil(len(samples) / spec.batch_size)
    total = per_epoch * spec.epochs
    step = 0
    out: list[SftEpoch] = []
    for epoch in range(1, spec.epochs + 1):
        t0 = time.perf_counter()
        order = list(range(len(samples)))
        random.Random(f"{seed}/{epoch}").shuffle(order)
        loss_sum, tok_sum, hits, norms, lr = 0.0, 0, 0, [], spec.lr
        for b in range(per_epoch):
            batch = [samples[i] for i in order[b * spec.batch_size : (b + 1) * spec.batch_size]]
            n_tok = sum(int(np.asarray(s.loss_mask).sum()) for s in batch)
            lr = sft_lr(step, total, spec)
            for group in opt.param_groups:
                group["lr"] = lr
            if accuracy:
                model.eval()
                hits += sum(_argmax_hits(model, s, dev) for s in batch)
            model.train()
            opt.zero_grad(set_to_none=True)
            for s in batch:
                loss = -sft_token_logprobs(model, s, dev).sum() / n_tok
                loss.backward()
                loss_sum += loss.item() * n_tok
            norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), spec.max_grad_norm))
            if not math.isfinite(norm) or not math.isfinite(loss_sum):
                opt.zero_grad(set_to_none=True)
                raise NonFiniteUpdateError(
                    f"sft epoch {epoch}, step {step}: non-finite loss or gradient norm ({norm}); no step "
                    f"taken: lower sft.lr ({spec.lr})"
                )
            opt.step()
            norms.append(norm)
            tok_sum += n_tok
            step += 1
        row = SftEpoch(
            epoch=epoch,
            loss=loss_sum / max(tok_sum, 1),
            tokens=tok_sum,
            token_accuracy=hits / max(tok_sum, 1) if accuracy else float("nan"),
            lr=lr,
            grad_norm=float(np.mean(norms)),
            steps=step,
            time_s=time.perf_counter() - t0,
        )
        out.append(row)
        if on_epoch is not None:
            on_epoch(row)
    model.eval()
    return out


def save_actor(model: nn.Module, out_dir: str | Path) -> Path:
    """Write ``<out_dir>/weights/actor.safetensors``, the file `t1_trainer.checkpoint.load_actor` reads.

    Same names and layout as the actor file of `t1_trainer.weights.save_weights` (tied tensors stored once),
    mode ``0666 & ~umask``.

    Returns:
        The written file.
    """
    from safetensors.torch import save_model

    from t1_trainer.weights import process_umask

    target = Path(out_dir) / "weights" / "actor.safetensors"
    target.parent.mkdir(parents=True, exist_ok=True)
    save_model(model, str(target))
    target.chmod(0o666 & ~process_umask())
    return target
