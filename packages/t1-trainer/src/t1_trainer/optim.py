"""The torch optimizer of both backends where they step with torch: AdamW, its parameter groups, the step.

`TorchBackend` steps its actor and critic with these; `MegatronBackend` does on the CPU, where megatron's own
``DistributedOptimizer`` cannot be built (its grad buffers allocate on a CUDA device). `clip_and_step` is the
non-finite guard of every such step: no update is applied from a non-finite gradient, and an update that
leaves a weight non-finite fails the step by the network's name.
"""

from __future__ import annotations

import torch
from torch import nn

from t1_spec import PPOSpec
from t1_trainer.errors import NonFiniteUpdateError

__all__ = ["adamw", "clip_and_step"]


def adamw(model: nn.Module, lr: float, ppo: PPOSpec) -> torch.optim.AdamW:
    """AdamW over ``model``'s trainable parameters with ``ppo``'s betas and weight decay (T1 §4.5).

    Decay on matrices only; norms, biases and 1-D gates are not decayed (the usual Megatron/HF split).

    Args:
        model: the network (actor or critic).
        lr: learning rate (``ppo.actor_lr`` or ``ppo.critic_lr``).
        ppo: the recipe's PPO section (``weight_decay``, ``adam_betas``).
    """
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [{"params": decay, "weight_decay": ppo.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=ppo.adam_betas)


def clip_and_step(model: nn.Module, opt: torch.optim.Optimizer, max_norm: float, name: str) -> float:
    """Clip the global grad norm to ``max_norm``, take one optimizer step, zero the gradients.

    Args:
        model: the network whose parameters ``opt`` holds.
        opt: its optimizer.
        max_norm: ``ppo.max_grad_norm``.
        name: ``actor`` or ``critic``, for the error and the learning-rate field it names.

    Returns:
        The global gradient norm before clipping.

    Raises:
        NonFiniteUpdateError: the grad norm is inf/NaN (no step taken, gradients dropped), or a parameter is
            inf/NaN after the step (naming the first few).
    """
    norm = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.grad is not None], max_norm)
    if not torch.isfinite(norm):
        opt.zero_grad(set_to_none=True)
        raise NonFiniteUpdateError(
            f"{name}: the gradient norm is {float(norm)}, so the loss or a sample's streams are not finite; "
            "the update was not applied"
        )
    opt.step()
    opt.zero_grad(set_to_none=True)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    finite = torch.stack([torch.isfinite(p.detach()).all() for _, p in named])
    if not bool(finite.all()):  # one device sync for the whole model
        bad = [n for (n, _), ok in zip(named, finite.tolist(), strict=True) if not ok]
        raise NonFiniteUpdateError(
            f"{name}: the optimizer step left {len(bad)} of {len(named)} parameter tensors inf or NaN "
            f"(first: {', '.join(bad[:3])}); lower ppo.{name}_lr (now {opt.param_groups[0]['lr']:g}) "
            "or ppo.max_grad_norm"
        )
    return float(norm)
