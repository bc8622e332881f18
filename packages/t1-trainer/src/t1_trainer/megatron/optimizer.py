"""Megatron-core's optimizer for the Megatron backend on CUDA, its forced offload, and zeroing (T1 §4.5).

On CUDA each network is wrapped in megatron's ``DistributedDataParallel`` and stepped by its
``DistributedOptimizer``; forced offload (``plan.offload: forced``) moves the idle network's parameters,
gradients and optimizer state to host memory. Not exercised on a machine without CUDA.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from t1_spec import PPOSpec

__all__ = ["megatron_optimizer", "offload_network", "zero_grads"]


def zero_grads(opt: Any) -> None:
    """Drops the gradients of a torch optimizer, or of megatron's optimizer and its DDP grad buffers."""
    if isinstance(opt, torch.optim.Optimizer):
        opt.zero_grad(set_to_none=True)
    else:  # megatron: the DDP grad buffers are zeroed with the optimizer's grads
        opt.zero_grad()
        for chunk in getattr(opt, "model_chunks", []) or []:
            chunk.zero_grad_buffer()


def megatron_optimizer(model: nn.Module, lr: float, ppo: PPOSpec) -> tuple[Any, Any]:
    """Megatron's ``DistributedDataParallel`` and ``DistributedOptimizer`` (Adam) for one network; CUDA only.

    Not exercised on a machine without CUDA (megatron's grad buffers allocate on the current CUDA device).
    Decay on every parameter but norms and biases (megatron's default grouping); the grad norm is clipped to
    ``ppo.max_grad_norm`` inside ``step``.

    Returns:
        ``(ddp, optimizer)``; gradients reach the optimizer through the DDP's hooks on ``model``'s parameters.
    """
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    cfg = model.config
    ddp = DistributedDataParallel(
        cfg, DistributedDataParallelConfig(use_distributed_optimizer=True, grad_reduce_in_fp32=True), model
    )
    opt_cfg = OptimizerConfig(
        optimizer="adam",
        lr=lr,
        weight_decay=ppo.weight_decay,
        adam_beta1=ppo.adam_betas[0],
        adam_beta2=ppo.adam_betas[1],
        clip_grad=ppo.max_grad_norm,
        bf16=cfg.bf16,
        params_dtype=cfg.params_dtype,
        use_distributed_optimizer=True,
    )
    return ddp, get_megatron_optimizer(opt_cfg, [ddp])


def offload_network(ddp: Any, opt: Any, *, to_host: bool) -> None:
    """Forced offload of one network on CUDA: parameters and grads (DDP buffers) and optimizer state."""
    for buffer in ddp.buffers + ddp.expert_parallel_buffers:
        if to_host:
            buffer.offload_to_cpu(move_params=True, move_grads=True)
        else:
            buffer.reload_from_cpu(move_params=True, move_grads=True)
    if to_host:
        opt.offload_to_cpu()
    else:
        opt.restore_from_cpu()
    torch.cuda.empty_cache()
