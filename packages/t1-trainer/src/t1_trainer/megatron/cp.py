"""Context parallelism (cp > 1) of the Megatron backend on the CPU: the layout, the gathers, the attention.

Layout. The backend forwards one sample at a time (``sbhd``, batch 1), padded at its end to a multiple of
``2 * cp * tp``. Rank ``r`` of the context-parallel group holds chunks ``r`` and ``2 * cp - 1 - r`` of the
``2 * cp`` equal chunks (megatron's load-balanced layout, which its ``RotaryEmbedding`` slices the rotary
table by); `sample_descriptor` states it as T1's packed-sequence descriptor of one real entry, and
`t1_trainer.context_parallel.stream_positions` turns it into indices. The token ids, the routing rows
(`t1_trainer.megatron.replay`) and the outputs are sharded and gathered by those indices, so the rule is
stated once.

Layers. Full attention is `CpDotProductAttention`: megatron's local ``DotProductAttention`` (its arithmetic
unchanged) on this rank's queries against the keys and values of the whole sample, all-gathered over the
group, with the causal mask built from the tokens' stream positions. megatron-core 0.19.2 builds context
parallelism for attention only through Transformer Engine (CUDA), whose local attention asserts cp = 1; the
all-gather form is the plain-torch one (its score matrix is ``[local, whole]``, fine for tests and short
samples, not for the 84k wall). Gated DeltaNet layers run T1's sequence-sharded scan (T1 §7.1, in
`t1_trainer.megatron.gdn_cpu`), not megatron's head-parallel all-to-all.

Loss. The last stage's output is all-gathered over the group into stream order (`gather_sequence`), so every
context-parallel rank computes the same loss, as every tp rank does; each rank's backward then reaches only
its own tokens, and `t1_trainer.megatron.sharding.sync_grads` sums the parameters' partial gradients over the
group. The one parameter used after the gather, the actor's LM head, has its whole gradient on every rank,
so its backward is divided by cp first (`replicated_in_loss`).

CPU only: on CUDA the backend's preflight refuses cp > 1.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.distributed as dist

from t1_trainer.context_parallel import PackedCPDescriptor, stream_positions

# CpDotProductAttention is defined on first access (module __getattr__): it subclasses megatron-core's layer.
__all__ = [  # noqa: F822
    "CpDotProductAttention",
    "cp_group",
    "gather_sequence",
    "local_positions",
    "replicated_in_loss",
    "rotary_on_this_rank",
    "sample_descriptor",
]


def sample_descriptor(length: int, cp: int) -> PackedCPDescriptor:
    """One real sample of ``length`` tokens split ``2 * cp`` ways (the backend's forward).

    Raises:
        DescriptorError: ``length`` is not a multiple of ``2 * cp``.
    """
    return PackedCPDescriptor(cp=cp, lengths=(int(length),), real=(True,), segments=(2 * cp,))


def cp_group() -> tuple[Any, int, int]:
    """The context-parallel group of megatron's parallel state, this rank's index in it and its size."""
    from megatron.core import parallel_state as ps

    return (
        ps.get_context_parallel_group(),
        int(ps.get_context_parallel_rank()),
        int(ps.get_context_parallel_world_size()),
    )


def local_positions(length: int) -> torch.Tensor:
    """Stream positions ``[length / cp]`` int64 of this rank's tokens of a ``length``-token forward."""
    _, rank, size = cp_group()
    return stream_positions(sample_descriptor(length, size), rank)


def rotary_on_this_rank(pos_emb: torch.Tensor, seq_dim: int, cp_group: Any) -> torch.Tensor:
    """The rotary table's rows of this rank's tokens: megatron's ``get_pos_emb_on_this_cp_rank`` on the CPU.

    megatron-core 0.19.2's own builds its chunk index on CUDA (``.cuda()``); this takes the same rows by
    `t1_trainer.context_parallel.stream_positions` (`t1_trainer.megatron.model.cpu_device_shim` swaps it in).

    Args:
        pos_emb: the rotary table of the whole sample, ``[length, ...]`` along ``seq_dim``.
        seq_dim: its sequence dimension.
        cp_group: the context-parallel group.

    Returns:
        ``[length / cp, ...]`` along ``seq_dim``.
    """
    rank, size = dist.get_rank(cp_group), dist.get_world_size(cp_group)
    desc = sample_descriptor(pos_emb.shape[seq_dim], size)
    return pos_emb.index_select(seq_dim, stream_positions(desc, rank).to(pos_emb.device))


class _Gather(torch.autograd.Function):
    """All-gather along dim 0 over a group, ranks in order; backward: this rank's slice of the gradient.

    With ``sum_grads`` the gradient is summed over the group first: every rank's copy feeds other loss terms.
    """

    @staticmethod
    def forward(ctx, x, group, rank, sum_grads):  # noqa: D102
        ctx.group, ctx.rank, ctx.sum_grads, ctx.rows = group, rank, sum_grads, x.shape[0]
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        grad = grad.contiguous()
        if ctx.sum_grads:
            grad = grad.clone()
            dist.all_reduce(grad, group=ctx.group)
        return grad[ctx.rank * ctx.rows : (ctx.rank + 1) * ctx.rows], None, None, None


def gather_sequence(x: torch.Tensor, *, sum_grads: bool) -> torch.Tensor:
    """Every context-parallel rank's ``x [local, ...]`` -> the whole sample ``[local * cp, ...]``, in order.

    Args:
        x: this rank's tokens in the load-balanced layout, sequence first.
        sum_grads: True where each rank's copy of the whole feeds a different part of the loss (the keys and
            values its own queries read), so a token's gradient is the sum over ranks; False where every rank
            computes the same loss from it (the last stage's output), so each keeps its own slice.

    Returns:
        ``[local * cp, ...]``, ``x``'s dtype, differentiable.
    """
    group, rank, size = cp_group()
    if size == 1:
        return x
    whole = _Gather.apply(x, group, rank, sum_grads)
    desc = sample_descriptor(whole.shape[0], size)
    order = torch.cat([stream_positions(desc, r) for r in range(size)]).to(x.device)
    return whole[torch.argsort(order)]


class _ScaleGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):  # noqa: D102
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        return grad * ctx.scale, None


def replicated_in_loss(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` unchanged, its gradient divided by cp: for a parameter used after `gather_sequence`.

    Every context-parallel rank then computes the same loss through it (the actor's LM head), so each holds
    the whole gradient, and `t1_trainer.megatron.sharding.sync_grads`, which sums partial gradients over the
    group, would count it cp times.
    """
    _, _, size = cp_group()
    return weight if size == 1 else _ScaleGrad.apply(weight, 1.0 / size)


def _attention_class() -> type:
    from megatron.core.transformer.dot_product_attention import DotProductAttention

    class CpDotProductAttention(DotProductAttention):
        """megatron's local ``DotProductAttention`` with the keys and values of every context-parallel rank.

        Called as megatron calls its core attention: ``query [sq, b, np, hn]``, ``key`` / ``value [sk, b, ng,
        hn]`` (this rank's load-balanced tokens, rotary applied), returns ``[sq, b, np * hn]``. The mask
        megatron passes is ignored (it would be local): the causal mask is the tokens' stream positions.
        """

        def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
            local = copy.copy(config)  # its constructor asserts cp = 1: the arithmetic it sets up is per rank
            local.context_parallel_size = 1
            super().__init__(local, *args, **kwargs)

        def forward(
            self,
            query: torch.Tensor,
            key: torch.Tensor,
            value: torch.Tensor,
            attention_mask: Any,
            attn_mask_type: Any = None,
            attention_bias: Any = None,
            packed_seq_params: Any = None,
        ) -> torch.Tensor:
            """This rank's queries against the whole sample's keys and values, causal by stream position."""
            if packed_seq_params is not None:
                raise NotImplementedError("CpDotProductAttention: packed (thd) sequences are not built")
            key = gather_sequence(key, sum_grads=True)
            value = gather_sequence(value, sum_grads=True)
            q_pos = local_positions(key.shape[0]).to(query.device)
            k_pos = torch.arange(key.shape[0], device=query.device)
            masked = (k_pos[None, :] > q_pos[:, None])[None, None]  # megatron's mask: True = not attended
            return super().forward(query, key, value, masked, attn_mask_type, attention_bias, None)

    return CpDotProductAttention


def __getattr__(name: str) -> Any:
    # The class subclasses megatron-core's, an optional extra: built on first use, not at import.
    if name == "CpDotProductAttention":
        cls = _attention_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
