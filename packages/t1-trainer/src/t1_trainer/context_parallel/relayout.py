"""Re-layout between the trainer's interleaved context-parallel layout and contiguous segments (T1 §7.1).

The trainer shards a packed stream for gradient balance: every split entry is cut into ``2 * cp`` chunks and
rank ``r`` holds chunks ``r`` and ``2 * cp - 1 - r``. The recurrent scan hands its state from rank ``r`` to
rank ``r + 1`` and so needs contiguity: in the contiguous layout rank ``r`` holds chunks ``2 * r`` and
``2 * r + 1`` of every split entry, which is one piece of ``length / cp`` tokens. Rank-local padding entries
sit on the same rank in both layouts. The move is one batched point-to-point exchange, each chunk sent once
to its destination (no rank ever holds the full stream), and it is differentiable: the gradient of a
re-layout is the inverse re-layout of the gradient.

Tensors are sequence-first, ``[local_tokens, ...]`` (the THD format), any dtype, on the CPU (gloo) or on
the group's device; CUDA tensors over a gloo group are staged through host memory.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.distributed as dist

from t1_trainer.context_parallel.descriptor import PackedCPDescriptor

__all__ = [
    "Layout",
    "contiguous_to_interleaved",
    "exchange",
    "group_rank",
    "interleaved_to_contiguous",
    "stream_positions",
]

Layout = Literal["interleaved", "contiguous"]
_Unit = tuple[int, int]  # (entry, chunk or segment index)


def group_rank(group: dist.ProcessGroup | None) -> tuple[int, int]:
    """This process's rank in ``group`` and the group's size; ``(0, 1)`` for None (no group)."""
    if group is None:
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def _units(desc: PackedCPDescriptor, layout: Layout, rank: int) -> list[tuple[_Unit, int]]:
    """The (unit, tokens) a rank holds in a layout, in local-stream order."""
    cp, out = desc.cp, []
    for e, (n, seg) in enumerate(zip(desc.lengths, desc.segments, strict=True)):
        if seg == cp:  # rank-local: the same segment in both layouts
            out.append(((e, rank), n // cp))
            continue
        chunks = (rank, 2 * cp - 1 - rank) if layout == "interleaved" else (2 * rank, 2 * rank + 1)
        out.extend(((e, c), n // (2 * cp)) for c in chunks)
    return out


def stream_positions(desc: PackedCPDescriptor, rank: int, layout: Layout = "interleaved") -> torch.Tensor:
    """Where each token ``rank`` holds sits in the full packed stream, in the rank's local order.

    The one statement of the layouts' rule for callers that shard or gather by index (the Megatron backend's
    token ids, routing rows and outputs): ``full[stream_positions(desc, r)]`` is rank ``r``'s local stream.

    Args:
        desc: the packed-sequence descriptor.
        rank: a rank of the group, in ``[0, desc.cp)``.
        layout: ``interleaved`` (the trainer's load-balanced shards) or ``contiguous``.

    Returns:
        int64 ``[desc.local_tokens]`` positions in ``[0, sum(desc.lengths))``, CPU.

    Raises:
        ValueError: ``rank`` not an integer or outside the group, or an unknown layout.
    """
    if isinstance(rank, bool) or not hasattr(rank, "__index__"):  # a fraction would index between chunks
        raise ValueError(f"stream_positions: rank {rank!r} is not an integer")
    rank = rank.__index__()
    if not 0 <= rank < desc.cp:
        raise ValueError(f"stream_positions: rank {rank} is outside [0, cp={desc.cp})")
    if layout not in ("interleaved", "contiguous"):
        raise ValueError(f"stream_positions: layout {layout!r} is not 'interleaved' or 'contiguous'")
    starts = [0]
    for n in desc.lengths:
        starts.append(starts[-1] + n)
    pieces = []
    for (entry, index), tokens in _units(desc, layout, rank):
        begin = starts[entry] + index * tokens  # a chunk (split entry) or segment (rank-local) of equal size
        pieces.append(torch.arange(begin, begin + tokens, dtype=torch.int64))
    return torch.cat(pieces)


def _owners(desc: PackedCPDescriptor, layout: Layout) -> dict[_Unit, tuple[int, int, int]]:
    """Unit -> (rank, local offset, tokens) in a layout."""
    where: dict[_Unit, tuple[int, int, int]] = {}
    for r in range(desc.cp):
        offset = 0
        for unit, n in _units(desc, layout, r):
            where[unit] = (r, offset, n)
            offset += n
    return where


def exchange(
    sends: dict[int, torch.Tensor],
    recv_shapes: dict[int, tuple[tuple[int, ...], torch.dtype]],
    group: dist.ProcessGroup | None,
    device: torch.device,
    *,
    tag: int = 0,
) -> dict[int, torch.Tensor]:
    """One batch of point-to-point sends and receives over ``group`` (peers are ranks in the group).

    Args:
        sends: peer -> tensor to send (contiguous, non-empty).
        recv_shapes: peer -> (shape, dtype) to receive.
        group: the process group (None: the default group).
        device: where received tensors are returned.
        tag: message tag, the same on both sides.

    Returns:
        peer -> received tensor on ``device``.
    """
    if not sends and not recv_shapes:
        return {}
    stage = dist.get_backend(group) == "gloo" and device.type != "cpu"
    ops, received = [], {}
    for peer, t in sends.items():
        t = t.contiguous().cpu() if stage else t.contiguous()
        ops.append(dist.P2POp(dist.isend, t, _global(group, peer), group, tag))
    for peer, (shape, dtype) in recv_shapes.items():
        buf = torch.empty(shape, dtype=dtype, device="cpu" if stage else device)
        received[peer] = buf
        ops.append(dist.P2POp(dist.irecv, buf, _global(group, peer), group, tag))
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    return {p: b.to(device) for p, b in received.items()}


def _global(group: dist.ProcessGroup | None, rank: int) -> int:
    return rank if group is None else dist.get_global_rank(group, rank)


def _permute(
    x: torch.Tensor, desc: PackedCPDescriptor, src: Layout, dst: Layout, group, tag: int
) -> torch.Tensor:
    me, _ = group_rank(group)
    src_at = _owners(desc, src)
    mine = [u for u, _ in _units(desc, dst, me)]
    sends: dict[int, list[torch.Tensor]] = {}
    for peer in range(desc.cp):
        if peer == me:
            continue
        for unit, _n in _units(desc, dst, peer):  # in the receiver's order
            r, off, n = src_at[unit]
            if r == me:
                sends.setdefault(peer, []).append(x[off : off + n])
    need: dict[int, int] = {}
    for unit in mine:
        r, _off, n = src_at[unit]
        if r != me:
            need[r] = need.get(r, 0) + n
    tail = tuple(x.shape[1:])
    got = exchange(
        {p: torch.cat(ts) for p, ts in sends.items()},
        {p: ((n, *tail), x.dtype) for p, n in need.items()},
        group,
        x.device,
        tag=tag,
    )
    cursor = dict.fromkeys(got, 0)
    pieces = []
    for unit in mine:
        r, off, n = src_at[unit]
        if r == me:
            pieces.append(x[off : off + n])
        else:
            pieces.append(got[r][cursor[r] : cursor[r] + n])
            cursor[r] += n
    return torch.cat(pieces)


class _Relayout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, desc, src, dst, group, tag):  # noqa: D102
        ctx.desc, ctx.src, ctx.dst, ctx.group, ctx.tag = desc, src, dst, group, tag
        return _permute(x, desc, src, dst, group, tag)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        return (
            _permute(grad.contiguous(), ctx.desc, ctx.dst, ctx.src, ctx.group, ctx.tag),
            None,
            None,
            None,
            None,
            None,
        )


def _relayout(x, desc, group, src: Layout, dst: Layout, where: str, tag: int) -> torch.Tensor:
    if desc is None:
        raise TypeError(f"{where}: a PackedCPDescriptor is required (offsets alone cannot place the chunks)")
    desc.check(x.shape[0], group, where=where)
    if desc.cp == 1:  # chunks (0, 1) in both layouts: the identity
        return x
    return _Relayout.apply(x, desc, src, dst, group, tag)


def interleaved_to_contiguous(
    x: torch.Tensor, desc: PackedCPDescriptor, group: dist.ProcessGroup | None, *, tag: int = 0
) -> torch.Tensor:
    """This rank's tokens of the load-balanced interleaved layout -> its contiguous pieces (T1 §7.1).

    Args:
        x: ``[local_tokens, ...]``: per entry, chunk ``r`` then chunk ``2 * cp - 1 - r`` of it (a rank-local
            entry: its one segment).
        desc: the packed-sequence descriptor, the same on every rank.
        group: the context-parallel group (None for one rank).
        tag: point-to-point tag, the same on every rank.

    Returns:
        ``[local_tokens, ...]``, same dtype and device: per entry, chunks ``2 * r`` and ``2 * r + 1``.

    Raises:
        TypeError: no descriptor.
        DescriptorError: the descriptor does not match ``x``'s length or the group's size.
    """
    return _relayout(x, desc, group, "interleaved", "contiguous", "interleaved_to_contiguous", tag)


def contiguous_to_interleaved(
    x: torch.Tensor, desc: PackedCPDescriptor, group: dist.ProcessGroup | None, *, tag: int = 0
) -> torch.Tensor:
    """The inverse of `interleaved_to_contiguous`: contiguous pieces back to the trainer's layout (T1 §7.1).

    Same arguments, shapes and errors as `interleaved_to_contiguous`.
    """
    return _relayout(x, desc, group, "contiguous", "interleaved", "contiguous_to_interleaved", tag)
