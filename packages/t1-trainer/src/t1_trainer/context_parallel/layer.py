"""A Qwen3.5 Gated DeltaNet layer evaluated context-parallel, state carried across ranks (T1 §7.1).

`gated_deltanet_cp` runs the mixer of a transformers ``Qwen3_5MoeGatedDeltaNet`` (the same weights, the same
arithmetic as its ``forward`` without a cache) on this rank's share of a packed micro-batch in the trainer's
interleaved layout: it re-lays the hidden states out contiguously, projects them, convolves with the
predecessors' halo, scans with the carried state, gates, projects out and re-lays the result back. The
projections are per token, so only the convolution and the scan talk to other ranks.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from t1_trainer.context_parallel.descriptor import PackedCPDescriptor
from t1_trainer.context_parallel.relayout import contiguous_to_interleaved, interleaved_to_contiguous
from t1_trainer.context_parallel.scan import causal_conv1d_cp, gated_delta_rule_cp

__all__ = ["gated_deltanet_cp"]


def gated_deltanet_cp(
    layer: nn.Module,
    hidden_states: torch.Tensor,
    *,
    desc: PackedCPDescriptor,
    group: dist.ProcessGroup | None,
    algorithm: Literal["chunk", "recurrent"] = "chunk",
    chunk_size: int = 64,
    tag: int = 0,
) -> torch.Tensor:
    """The Gated DeltaNet mixer on this rank's interleaved tokens (T1 §7.1).

    Args:
        layer: a transformers ``Qwen3_5MoeGatedDeltaNet`` (or a module with its attributes: ``in_proj_qkv``,
            ``in_proj_z``, ``in_proj_a``, ``in_proj_b``, ``conv1d``, ``A_log``, ``dt_bias``, ``norm``,
            ``out_proj``, ``key_dim``, ``value_dim``, ``head_k_dim``, ``head_v_dim``, ``activation``).
        hidden_states: ``[local_tokens, hidden]`` in the trainer's interleaved layout.
        desc: the packed-sequence descriptor, the same on every rank.
        group: the context-parallel group (None for one rank).
        algorithm: the scan's form (`gated_delta_rule_cp`).
        chunk_size: chunk of the ``chunk`` form, tokens.
        tag: point-to-point tag, the same on every rank.

    Returns:
        ``[local_tokens, hidden]`` in the interleaved layout, ``hidden_states``' dtype.

    Raises:
        TypeError: no descriptor.
        DescriptorError: the descriptor does not match the tensor's length or the group's size.
    """
    if desc is None:
        raise TypeError("gated_deltanet_cp: a PackedCPDescriptor is required to place sample boundaries")
    desc.check(hidden_states.shape[0], group, where="gated_deltanet_cp")
    h = interleaved_to_contiguous(hidden_states, desc, group, tag=tag)
    n = h.shape[0]
    mixed = causal_conv1d_cp(
        layer.in_proj_qkv(h),
        layer.conv1d.weight.squeeze(1),
        layer.conv1d.bias,
        desc=desc,
        group=group,
        activation=layer.activation,
    )
    query, key, value = torch.split(mixed, [layer.key_dim, layer.key_dim, layer.value_dim], dim=-1)
    query = query.reshape(n, -1, layer.head_k_dim)
    key = key.reshape(n, -1, layer.head_k_dim)
    value = value.reshape(n, -1, layer.head_v_dim)
    z = layer.in_proj_z(h).reshape(-1, layer.head_v_dim)
    beta = layer.in_proj_b(h).sigmoid()
    # as transformers computes it: A in float32 so that a low-precision A_log never gives -inf
    g = -layer.A_log.float().exp() * F.softplus(layer.in_proj_a(h).float() + layer.dt_bias)
    core = gated_delta_rule_cp(
        query,
        key,
        value,
        g,
        beta,
        desc=desc,
        group=group,
        algorithm=algorithm,
        chunk_size=chunk_size,
        tag=tag,
    )
    core = layer.norm(core.reshape(-1, layer.head_v_dim), z).reshape(n, -1)
    return contiguous_to_interleaved(layer.out_proj(core), desc, group, tag=tag)
