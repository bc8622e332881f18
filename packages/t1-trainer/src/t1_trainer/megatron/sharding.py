"""Weights and gradients of the Megatron backend over its tp and ep ranks, on megatron's own groups (T1 §7).

A model built under megatron-core's parallel state (`t1_trainer.megatron.parallel`) holds on each rank the
shards its layers create: ``ColumnParallelLinear`` / ``RowParallelLinear`` / ``VocabParallelEmbedding``
weights split along ``partition_dim`` over the tp group (``partition_stride`` 2 for the gated ``linear_fc1``:
each rank holds its slice of the gate half, then of the up half; a Gated DeltaNet's fused ``in_proj`` and
``conv1d`` per section, marked ``partition_sections`` by `t1_trainer.megatron.model.build_gpt`), and the
experts ``E / ep`` per rank, renumbered ``local_experts.0 ..`` (rank ``r`` holds global experts ``r E / ep
..``; megatron marks their parameters ``allreduce = False``). T1's name map (`t1_trainer.megatron.names`)
works on the full logical tensors of one rank; this module cuts those into a rank's shards (`shard_state`) and
gathers them back (`gather_state`), reading the attributes megatron's layers set and T1's section mark.

Gradients (`sync_grads`). megatron's ``DistributedDataParallel`` and ``finalize_model_grads`` do this on
CUDA; on the CPU their grad buffers cannot be built (see `t1_trainer.megatron.backend`), so it is done here
with the same groups and megatron DDP's default scaling (each rank's loss is a mean over the data its rank
ran; the update loop here runs the whole batch on every data-parallel rank): a dense parameter is summed
over megatron's data-and-context-parallel group and divided by dp (context-parallel ranks hold disjoint
tokens of the same sample, so their gradients are partial sums, as the tp ranks' are), and summed over the
tp group when it is not tensor-parallel (with sequence parallelism each tp rank's norms, router,
shared-expert gate and q/k norms see only its own token block or its own heads, so its gradient is a partial
sum); an expert parameter is scaled by 1/dp (its tokens came from every data-parallel and context-parallel
rank of its ep group) and summed over the expert-data-parallel group.
`global_grad_norm` counts each distinct shard once over the whole world. Pipeline stages (pp > 1) hold
disjoint layers, renumbered ``decoder.layers.0 ..`` on each stage (a stage's first layer is global layer
``layer_number - 1``): `shard_state` reads and `gather_state` writes the global numbers, and `gather_state`
gathers the stages' dicts over the pipeline group; no parameter is shared between stages (the backend refuses
tied embeddings with pp > 1), so no gradient sum crosses them. Expert tensor parallelism (etp > 1): an
expert's weights are cut over the expert-tp group as tp cuts dense ones (megatron marks them
tensor-parallel), so `shard_state` and `gather_state` take the etp rank and group for them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from t1_trainer.errors import NonFiniteUpdateError
from t1_trainer.optim import clip_and_step

__all__ = [
    "gather_state",
    "global_grad_norm",
    "is_expert",
    "model_parallel_step",
    "shard_state",
    "sync_grads",
]

_EXPERT = re.compile(r"^(.*\.mlp\.experts\.local_experts\.)(\d+)(\..*)$")
_LAYER = re.compile(r"^(decoder\.layers\.)(\d+)(\..*)$")


def is_expert(param: nn.Parameter) -> bool:
    """True for a routed expert's parameter (megatron sets ``allreduce = False`` on them)."""
    return getattr(param, "allreduce", True) is False


def _ps() -> Any:
    from megatron.core import parallel_state as ps

    return ps


def _global_name(name: str, ep_rank: int, local_experts: int) -> str:
    """A local parameter name with its expert renumbered globally (``local_experts.{ep_rank * n + i}``)."""
    m = _EXPERT.match(name)
    if m is None:
        return name
    return f"{m.group(1)}{ep_rank * local_experts + int(m.group(2))}{m.group(3)}"


def _layer_offset(model: nn.Module) -> int:
    """Global index of this pipeline stage's first layer (0 without stages, or a stage without layers)."""
    layers = getattr(getattr(model, "decoder", None), "layers", None)
    return int(layers[0].layer_number) - 1 if layers else 0


def _staged_name(name: str, offset: int) -> str:
    """A stage's local layer name with its global layer number (``decoder.layers.{offset + i}``)."""
    m = _LAYER.match(name)
    return name if m is None or not offset else f"{m.group(1)}{offset + int(m.group(2))}{m.group(3)}"


def _local_experts(model: nn.Module) -> int:
    config = model.config
    return int(config.num_moe_experts or 0) // max(1, int(config.expert_model_parallel_size))


def _sections(t: torch.Tensor, param: nn.Parameter, dim: int) -> tuple[torch.Tensor, ...]:
    """``t`` (full, or one rank's shard) cut along ``dim`` into the sections each rank holds a slice of.

    ``partition_sections`` (full sizes, T1's mark on a Gated DeltaNet's fused ``in_proj`` and ``conv1d``:
    q, k, v, z, beta, alpha) when set, else ``partition_stride`` equal sections (megatron's gated fc1).
    """
    sections = getattr(param, "partition_sections", None)
    if sections is not None:
        full = sum(sections)
        return torch.split(t, [n * t.shape[dim] // full for n in sections], dim=dim)
    return t.chunk(int(getattr(param, "partition_stride", 1)), dim=dim)


def _shard_of(full: torch.Tensor, param: nn.Parameter, rank: int, name: str) -> torch.Tensor:
    """Rank ``rank``'s slice of ``full`` along ``param.partition_dim``, section-aware; ``full`` if unsplit."""
    shape = tuple(param.shape)
    if tuple(full.shape) == shape:
        return full
    dim = int(getattr(param, "partition_dim", -1))
    if dim < 0 or full.dim() != param.dim() or full.shape[dim] % shape[dim]:
        raise ValueError(
            f"{name}: the full tensor {tuple(full.shape)} does not split into this rank's {shape} "
            f"(partition_dim {dim})"
        )
    parts = int(full.shape[dim] // shape[dim])
    out = torch.cat([sec.chunk(parts, dim=dim)[rank] for sec in _sections(full, param, dim)], dim=dim)
    if tuple(out.shape) != shape:
        raise ValueError(f"{name}: sliced {tuple(out.shape)} but this rank holds {shape}")
    return out


def shard_state(model: nn.Module, full: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """This rank's shards of the full logical state dict ``full`` (tp = ep = 1 names), keyed by local name.

    Args:
        model: a megatron ``GPTModel`` built under the current parallel state.
        full: full tensors under global names (`t1_trainer.megatron.names.hf_to_megatron`).

    Returns:
        ``{local name: shard}`` for every parameter of ``model`` whose global name is in ``full`` (the
        caller's load checks that nothing is missing); other keys of ``full`` (other ranks' experts) are
        left out.

    Raises:
        ValueError: a full tensor does not split into the rank's shape.
    """
    ps = _ps()
    tp_rank, etp_rank = ps.get_tensor_model_parallel_rank(), ps.get_expert_tensor_parallel_rank()
    ep_rank, n_local = ps.get_expert_model_parallel_rank(), _local_experts(model)
    offset = _layer_offset(model)
    out: dict[str, torch.Tensor] = {}
    for name, param in model.named_parameters():
        key = _staged_name(_global_name(name, ep_rank, n_local) if is_expert(param) else name, offset)
        if key in full:
            rank = etp_rank if is_expert(param) else tp_rank
            out[name] = _shard_of(full[key], param, rank, key)
    return out


def _all_gather(t: torch.Tensor, group: Any) -> list[torch.Tensor]:
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, t.contiguous(), group=group)
    return parts


def _unshard(t: torch.Tensor, param: nn.Parameter, group: Any) -> torch.Tensor:
    """The full tensor of a tensor-parallel shard: all-gather over ``group``, section-aware."""
    if group is None or dist.get_world_size(group) == 1 or not getattr(param, "tensor_model_parallel", False):
        return t
    dim = int(param.partition_dim)
    pieces = [_sections(p, param, dim) for p in _all_gather(t, group)]
    return torch.cat([pieces[r][s] for s in range(len(pieces[0])) for r in range(len(pieces))], dim=dim)


def gather_state(model: nn.Module, tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The full logical tensors (global names) of per-rank ``tensors`` keyed by ``model``'s parameter names.

    A collective: every rank of the world calls it with the same keys (weights, or gradients for tests),
    and every rank gets the whole dict (tp shards all-gathered, experts all-gathered over the ep group,
    pipeline stages' layers renumbered globally and their dicts all-gathered over the pipeline group).

    Args:
        model: the megatron model the names belong to.
        tensors: ``{local parameter name: tensor of that parameter's local shape}``.
    """
    ps = _ps()
    tp_group = ps.get_tensor_model_parallel_group() if ps.get_tensor_model_parallel_world_size() > 1 else None
    etp_group = (
        ps.get_expert_tensor_parallel_group() if ps.get_expert_tensor_parallel_world_size() > 1 else None
    )
    ep_size, n_local = ps.get_expert_model_parallel_world_size(), _local_experts(model)
    ep_group = ps.get_expert_model_parallel_group() if ep_size > 1 else None
    out: dict[str, torch.Tensor] = {}
    for name, param in model.named_parameters():
        if name not in tensors:
            continue
        t = tensors[name].detach()
        if not is_expert(param):
            out[name] = _unshard(t, param, tp_group)
            continue
        t = _unshard(t, param, etp_group)
        ranks = _all_gather(t, ep_group) if ep_group is not None else [t]
        for r, part in enumerate(ranks):
            out[_global_name(name, r, n_local)] = part
    if ps.get_pipeline_model_parallel_world_size() == 1:
        return out
    offset = _layer_offset(model)
    mine = {_staged_name(k, offset): v.cpu() for k, v in out.items()}
    stages: list[Any] = [None] * ps.get_pipeline_model_parallel_world_size()
    dist.all_gather_object(stages, mine, group=ps.get_pipeline_model_parallel_group())
    return {k: v for stage in stages for k, v in stage.items()}


def _groups(param: nn.Parameter) -> list[Any]:
    """The groups a parameter's gradient is summed over, before the 1/dp scale (see the module docstring)."""
    ps = _ps()
    if is_expert(param):
        edp = ps.get_expert_data_parallel_world_size()
        return [ps.get_expert_data_parallel_group()] if edp > 1 else []
    groups = []
    if ps.get_data_parallel_world_size(with_context_parallel=True) > 1:
        groups.append(ps.get_data_parallel_group(with_context_parallel=True))
    if ps.get_tensor_model_parallel_world_size() > 1 and not getattr(param, "tensor_model_parallel", False):
        groups.append(ps.get_tensor_model_parallel_group())
    return groups


def sync_grads(model: nn.Module) -> None:
    """Sums each parameter's gradient over its groups and scales it by 1/dp, in place; a collective.

    A gradient that is None on some rank but not on another is taken as zeros there; one that is None on
    every rank stays None (as one rank would leave it, so AdamW skips it alike).
    """
    params = [p for p in model.parameters() if p.requires_grad]
    if not params or dist.get_world_size() == 1:
        return
    ps = _ps()
    dp = ps.get_data_parallel_world_size()  # cp ranks hold disjoint tokens: their partial sums add, unscaled
    has = torch.tensor([float(p.grad is not None) for p in params])
    if ps.get_pipeline_model_parallel_world_size() == 1:
        dist.all_reduce(has, op=dist.ReduceOp.MAX)
    else:  # stages hold other parameters: over this stage's ranks only (its tp x dp grid)
        dist.all_reduce(has, op=dist.ReduceOp.MAX, group=ps.get_tensor_model_parallel_group())
        dp_group = ps.get_data_parallel_group(with_context_parallel=True)
        dist.all_reduce(has, op=dist.ReduceOp.MAX, group=dp_group)
    for p, any_grad in zip(params, has.tolist(), strict=True):
        if not any_grad:
            continue
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        for group in _groups(p):
            dist.all_reduce(p.grad, group=group)
        if dp > 1:
            p.grad.div_(dp)


def global_grad_norm(model: nn.Module) -> torch.Tensor:
    """The L2 norm of the whole model's gradient after `sync_grads`, each distinct shard counted once.

    Returns:
        A float32 scalar, the same on every rank (a sum over the world).
    """
    ps = _ps()
    dense_owner = ps.get_data_parallel_rank(with_context_parallel=True) == 0
    tp_rank, edp_rank = ps.get_tensor_model_parallel_rank(), ps.get_expert_data_parallel_rank()
    total = torch.zeros((), dtype=torch.float32)
    for p in model.parameters():
        if p.grad is None:
            continue
        if is_expert(p):
            owned = edp_rank == 0
        else:
            owned = dense_owner and (getattr(p, "tensor_model_parallel", False) or tp_rank == 0)
        if owned:
            total += p.grad.detach().float().pow(2).sum().cpu()
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(total)
    return total.sqrt()


def model_parallel_step(model: nn.Module, opt: torch.optim.Optimizer, max_norm: float, name: str) -> float:
    """One CPU step above one rank: `sync_grads`, clip by `global_grad_norm`, AdamW step; the norm.

    Args:
        model: the network (actor or critic) whose gradients the backward left.
        opt: its torch optimizer.
        max_norm: ``ppo.max_grad_norm``.
        name: ``actor`` or ``critic``, for errors.

    Raises:
        NonFiniteUpdateError: as `t1_trainer.optim.clip_and_step` (on every rank alike: the norm is global).
    """
    sync_grads(model)
    norm = global_grad_norm(model)
    if not torch.isfinite(norm):
        opt.zero_grad(set_to_none=True)
        raise NonFiniteUpdateError(
            f"{name}: the gradient norm is {float(norm)} over the model-parallel group, so the loss or a "
            "sample's streams are not finite; the update was not applied"
        )
    coef = min(1.0, max_norm / (float(norm) + 1e-6))  # torch's clip_grad_norm_ formula
    if coef < 1.0:
        for p in model.parameters():
            if p.grad is not None:
                p.grad.mul_(coef)
    clip_and_step(model, opt, float("inf"), name)  # already clipped: the step and the finite check
    return float(norm)
