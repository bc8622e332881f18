"""The sequence-sharded gated delta rule and its causal convolution, exact across ranks (T1 §7.1).

Each rank evaluates its own contiguous token segment of every real sample and hands the carried recurrent
state to its successor, so the scan stays sequentially exact while its activation residency divides by
``cp`` (T1 §7.1). Rank ``r`` receives the states of all real samples from rank ``r - 1`` in one message
(zeros on rank 0), scans its pieces from them, and sends the final states on; in the backward pass the
state's gradient travels the other way, from rank ``r + 1`` to rank ``r``. The short causal convolution in
front of the scan needs the ``kernel - 1`` tokens that precede each piece: the halo, gathered from the
predecessors (a piece shorter than the halo takes tokens from several of them). State and halo start at zero
at every sample boundary, which the packed-sequence descriptor places (`PackedCPDescriptor`).

The per-segment arithmetic is transformers' torch reference of the gated delta rule (``qwen3_5_moe``'s
``torch_chunk_gated_delta_rule`` and ``torch_recurrent_gated_delta_rule``), called as the plain torch
function even where flash-linear-attention is installed: T1 §7.1 requires the algorithm to be pinned, since a
library that switches implementations by heuristics decouples the trainer's numerics. With ``chunk`` the
output is bit-identical to one rank when every piece is a multiple of ``chunk_size`` tokens (the chunks then
fall on the same tokens); otherwise the chunk grid moves and the result agrees to float32 rounding.
``recurrent`` (token by token) is bit-identical at any piece length and much slower.

The cost T1 accepts knowingly: the ranks of a layer's scan run one after another (rank ``r`` waits for rank
``r - 1``'s state), so the scan's time does not divide by ``cp``; its memory does.

Why in ``t1_trainer``: context parallelism is a trainer-side plan (the engine never shards a sequence), so
these functions sit with the trainer's rank groups for the Megatron backend to call, and depend on nothing
of megatron-core (they run over any ``torch.distributed`` group, gloo included).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.distributed as dist
import torch.nn.functional as F
from transformers.activations import ACT2FN
from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as _hf

from t1_trainer.context_parallel.descriptor import PackedCPDescriptor
from t1_trainer.context_parallel.relayout import exchange, group_rank

__all__ = ["causal_conv1d_cp", "gated_delta_rule_cp"]

# The torch functions behind transformers' kernel-hub wrappers (pinned: T1 §7.1).
_CHUNK = getattr(_hf.torch_chunk_gated_delta_rule, "__wrapped__", _hf.torch_chunk_gated_delta_rule)
_RECURRENT = getattr(
    _hf.torch_recurrent_gated_delta_rule, "__wrapped__", _hf.torch_recurrent_gated_delta_rule
)


def _local_scan(
    q, k, v, g, beta, desc: PackedCPDescriptor, s_in, algorithm: str, chunk_size: int, l2norm: bool
):
    outs, finals, offset, i = [], [], 0, 0
    for e, n in enumerate(desc.piece_lengths):
        sl = slice(offset, offset + n)
        offset += n
        if not desc.real[e]:
            outs.append(q.new_zeros((n, v.shape[1], v.shape[2])))
            continue
        init = None if s_in is None else s_in[i : i + 1]
        args = (q[sl][None], k[sl][None], v[sl][None], g[sl][None], beta[sl][None])
        kw = {"initial_state": init, "output_final_state": True, "use_qk_l2norm_in_kernel": l2norm}
        if algorithm == "chunk":
            o, s = _CHUNK(*args, chunk_size=chunk_size, **kw)
        else:
            o, s = _RECURRENT(*args, **kw)
        outs.append(o[0])
        finals.append(s[0])
        i += 1
    return torch.cat(outs), torch.stack(finals)


class _SegmentScan(torch.autograd.Function):
    """Local scan from the predecessor's state; state forward, state gradient backward, point to point."""

    @staticmethod
    def forward(ctx, q, k, v, g, beta, desc, group, algorithm, chunk_size, l2norm, tag):  # noqa: D102
        me, size = group_rank(group)
        shape = (len(desc.real_entries), v.shape[1], k.shape[2], v.shape[2])
        s_in = None
        if me > 0:
            s_in = exchange({}, {me - 1: (shape, torch.float32)}, group, q.device, tag=tag)[me - 1]
        needs = any(t.requires_grad for t in (q, k, v, g, beta))
        leaves = [t.detach().requires_grad_(t.requires_grad) for t in (q, k, v, g, beta)]
        if s_in is not None and needs:
            s_in.requires_grad_(True)
        with torch.set_grad_enabled(needs):
            out, s_out = _local_scan(*leaves, desc, s_in, algorithm, chunk_size, l2norm)
        if me < size - 1:
            exchange({me + 1: s_out.detach()}, {}, group, q.device, tag=tag)
        ctx.graph = (leaves, s_in, out, s_out) if needs else None
        ctx.group, ctx.tag = group, tag
        return out.detach()

    @staticmethod
    def backward(ctx, grad_out):  # noqa: D102
        leaves, s_in, out, s_out = ctx.graph
        ctx.graph = None  # the local graph is freed with this backward
        me, size = group_rank(ctx.group)
        if me < size - 1:
            spec = {me + 1: (tuple(s_out.shape), s_out.dtype)}
            grad_s_out = exchange({}, spec, ctx.group, grad_out.device, tag=ctx.tag)[me + 1]
        else:
            grad_s_out = torch.zeros_like(s_out)
        wanted = [t for t in leaves if t.requires_grad] + ([s_in] if s_in is not None else [])
        grads = list(torch.autograd.grad((out, s_out), wanted, (grad_out, grad_s_out), allow_unused=True))
        if s_in is not None:
            grad_s_in = grads.pop()
            grad_s_in = torch.zeros_like(s_in) if grad_s_in is None else grad_s_in
            exchange({me - 1: grad_s_in}, {}, ctx.group, grad_out.device, tag=ctx.tag)
        it = iter(grads)
        per_input = [next(it) if t.requires_grad else None for t in leaves]
        return (*per_input, None, None, None, None, None, None)


def gated_delta_rule_cp(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    *,
    desc: PackedCPDescriptor,
    group: dist.ProcessGroup | None,
    algorithm: Literal["chunk", "recurrent"] = "chunk",
    chunk_size: int = 64,
    use_qk_l2norm: bool = True,
    tag: int = 0,
) -> torch.Tensor:
    """The gated delta rule over this rank's contiguous pieces, state carried across ranks (T1 §7.1).

    Every rank of ``group`` must call it (same descriptor, algorithm and tag), and every rank must run the
    backward through its output when one does: the state's gradient is handed from rank to rank.

    Args:
        query: ``[local_tokens, key_heads, key_dim]`` in the contiguous layout (`interleaved_to_contiguous`).
        key: ``[local_tokens, key_heads, key_dim]``.
        value: ``[local_tokens, value_heads, value_dim]``; ``value_heads`` a multiple of ``key_heads``.
        g: ``[local_tokens, value_heads]``, the log decay (``<= 0``).
        beta: ``[local_tokens, value_heads]``, the write strength in ``(0, 1)``.
        desc: the packed-sequence descriptor; the state restarts at zero at every real sample, and padding
            entries give zeros.
        group: the context-parallel group (None for one rank).
        algorithm: ``chunk`` (transformers' chunked form) or ``recurrent`` (token by token).
        chunk_size: chunk of the ``chunk`` form, tokens.
        use_qk_l2norm: L2-normalise queries and keys in the kernel (Qwen3.5 does).
        tag: point-to-point tag, the same on every rank (distinct per concurrently pending scan).

    Returns:
        ``[local_tokens, value_heads, value_dim]`` in ``query``'s dtype (computed in float32).

    Raises:
        TypeError: no descriptor.
        DescriptorError: the descriptor does not match the tensors' length or the group's size.
        ValueError: an unknown algorithm.
    """
    if desc is None:
        raise TypeError("gated_delta_rule_cp: a PackedCPDescriptor is required to place sample boundaries")
    desc.check(query.shape[0], group, where="gated_delta_rule_cp")
    if algorithm not in ("chunk", "recurrent"):
        raise ValueError(f"gated_delta_rule_cp: algorithm {algorithm!r} is not 'chunk' or 'recurrent'")
    if not desc.real_entries:
        return query.new_zeros((query.shape[0], value.shape[1], value.shape[2]))
    return _SegmentScan.apply(
        query, key, value, g, beta, desc, group, algorithm, chunk_size, use_qk_l2norm, tag
    )


class _GatherTails(torch.autograd.Function):
    """All-gather of every rank's piece tails; the backward sums the copies' gradients onto their owner."""

    @staticmethod
    def forward(ctx, tails, group):  # noqa: D102
        me, size = group_rank(group)
        ctx.group, ctx.me = group, me
        stage = dist.get_backend(group) == "gloo" and tails.device.type != "cpu"
        src = tails.cpu() if stage else tails.contiguous()
        every = [torch.empty_like(src) for _ in range(size)]
        dist.all_gather(every, src, group=group)
        return torch.stack(every).to(tails.device)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        stage = dist.get_backend(ctx.group) == "gloo" and grad.device.type != "cpu"
        total = grad.cpu() if stage else grad.contiguous().clone()
        dist.all_reduce(total, group=ctx.group)
        return total[ctx.me].to(grad.device), None


def causal_conv1d_cp(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    *,
    desc: PackedCPDescriptor,
    group: dist.ProcessGroup | None,
    activation: str | None = "silu",
) -> torch.Tensor:
    """Depthwise causal convolution of this rank's contiguous pieces with the predecessors' halo (T1 §7.1).

    Equals, piece by piece, the convolution of each whole sample with ``kernel - 1`` zeros of left padding
    (transformers' ``causal_conv1d_fn``); padding entries are convolved with a zero halo.

    Args:
        x: ``[local_tokens, channels]`` in the contiguous layout.
        weight: ``[channels, kernel]`` (a ``Conv1d``'s weight without its middle axis).
        bias: ``[channels]`` or None.
        desc: the packed-sequence descriptor.
        group: the context-parallel group (None for one rank).
        activation: a transformers activation name applied to the output, or None.

    Returns:
        ``[local_tokens, channels]`` in ``x``'s dtype.

    Raises:
        TypeError: no descriptor.
        DescriptorError: the descriptor does not match ``x``'s length or the group's size.
    """
    if desc is None:
        raise TypeError("causal_conv1d_cp: a PackedCPDescriptor is required to place sample boundaries")
    desc.check(x.shape[0], group, where="causal_conv1d_cp")
    me, size = group_rank(group)
    halo, channels = weight.shape[-1] - 1, x.shape[1]
    pieces = list(torch.split(x, list(desc.piece_lengths)))
    gathered = None
    if size > 1 and halo > 0:
        tails = torch.stack([F.pad(p[-halo:], (0, 0, halo - min(halo, p.shape[0]), 0)) for p in pieces])
        gathered = _GatherTails.apply(tails, group)  # [cp, entries, halo, channels]
    outs = []
    for e, piece in enumerate(pieces):
        if gathered is None:
            before = x.new_zeros((halo, channels))
        else:
            # Rows of [zeros; every rank's tail]: the predecessors' valid rows, last ``halo`` of them. Every
            # rank selects from the gathered tensor (rank 0 only zeros), so that every rank's backward
            # reaches the gather's collective.
            valid = min(halo, piece.shape[0])
            rows = list(range(halo))
            if desc.real[e]:
                rows += [halo + r * halo + j for r in range(me) for j in range(halo - valid, halo)]
            table = torch.cat([x.new_zeros((halo, channels)), gathered[:, e].reshape(size * halo, channels)])
            before = table.index_select(0, torch.tensor(rows[-halo:], device=x.device))
        full = torch.cat([before, piece])
        y = F.conv1d(full.T[None].to(weight.dtype), weight[:, None, :], bias, groups=channels)[0].T
        outs.append(ACT2FN[activation](y) if activation is not None else y)
    return torch.cat(outs).to(x.dtype)
