"""Variable-length packed forwards of the policy's decoder: several sequences in one ``[1, N]`` row.

`varlen_forward` makes every forward of a Qwen3.5-MoE decoder (``actor.model``, ``critic.body``) inside it
treat its one input row as consecutive sequences of the given lengths, each computed as if it ran alone:

* **Positions** restart at 0 in every sequence (rotary embeddings as in an unpacked forward).
* **Full attention** is block-diagonal causal: transformers' own mask builder recognises packed sequences
  from position ids that restart (``create_causal_mask`` with no 2-D mask), so a token attends to the earlier
  tokens of its own sequence only, in whatever attention implementation the model runs (the mask is
  materialised for eager and SDPA; flash-attention reads the same position ids).
* **Gated DeltaNet** (the linear-attention layers): their causal conv and recurrent scan must not carry state
  from one sequence into the next. On the CPU transformers runs its torch reference of both, which takes no
  ``cu_seqlens``, so each such layer's input is laid out for the layer call as a right-padded ``[B, T_max]``
  batch (one row per sequence, a 2-D padding mask that zeroes the padding) and its output is gathered back to
  the packed row. Right padding keeps every real position's conv window and scan prefix exactly the unpacked
  one (padding only ever comes after a sequence's tokens), and the layer runs ONE batched call instead of B:
  the chunked scan batches its matmuls over B. The cost is the layer's projections and scan on the padding
  (``B * T_max - N`` positions); a per-sequence loop would avoid it at B calls per layer, which on the tiny
  CPU model is what packing exists to remove.
* **MoE, norms, projections, the LM head** act per token and run on the packed row unchanged.

So the hidden states of a packed forward equal those of each sequence's own forward up to fp32 reduction
order (tested in ``tests/t1_trainer/test_packing.py``). Used by the torch trainer's packed micro-batches
(`t1_trainer.packing`); routing replay of a packed row is `t1_r3.replay_routing_packed`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn

__all__ = ["packed_position_ids", "varlen_forward"]

_SUPPORTED_LAYERS = frozenset({"full_attention", "linear_attention"})


def packed_position_ids(lengths: Sequence[int], device: torch.device | None = None) -> torch.Tensor:
    """Position ids int64 ``[N]`` (``N = sum(lengths)``) restarting at 0 in every sequence.

    Raises:
        ValueError: an empty ``lengths`` or a length below 1.
    """
    if not lengths or min(lengths) < 1:
        raise ValueError(f"packed lengths {list(lengths)}: need one or more sequences of >= 1 token each")
    return torch.cat([torch.arange(int(n), device=device) for n in lengths])


def _clipped(lengths: Sequence[int], n: int) -> list[int]:
    """The sequence lengths covering the first ``n`` packed tokens (the last one cut short)."""
    out, left = [], n
    for length in lengths:
        if left <= 0:
            break
        out.append(min(int(length), left))
        left -= out[-1]
    return out


class _PaddedLayout:
    """Packed row ``[1, n]`` <-> right-padded batch ``[B, T_max]`` index maps for one set of lengths."""

    def __init__(self, lengths: Sequence[int], device: torch.device) -> None:
        self.lengths = [int(n) for n in lengths]
        self.t_max = max(self.lengths)
        rows = torch.cat([torch.full((n,), b, dtype=torch.long) for b, n in enumerate(self.lengths)])
        cols = torch.cat([torch.arange(n) for n in self.lengths])
        self.flat = (rows * self.t_max + cols).to(device)  # packed token -> its slot in the [B * T_max] batch
        mask = torch.zeros(len(self.lengths), self.t_max, dtype=torch.long)
        for b, n in enumerate(self.lengths):
            mask[b, :n] = 1
        self.mask = mask.to(device)

    def pad(self, packed: torch.Tensor) -> torch.Tensor:
        """``[1, n, H]`` -> ``[B, T_max, H]``, zeros after each sequence."""
        hidden = packed.shape[-1]
        out = packed.new_zeros(len(self.lengths) * self.t_max, hidden)
        out = out.index_copy(0, self.flat, packed[0])
        return out.view(len(self.lengths), self.t_max, hidden)

    def unpad(self, padded: torch.Tensor) -> torch.Tensor:
        """``[B, T_max, H]`` -> ``[1, n, H]``, the padding dropped."""
        return padded.reshape(-1, padded.shape[-1]).index_select(0, self.flat)[None]


def _linear_attention_layers(trunk: nn.Module) -> list[nn.Module]:
    """The Gated DeltaNet token mixers of ``trunk``, checked to be the only non-attention layers."""
    config = getattr(trunk, "config", None)
    types = set(getattr(config, "layer_types", None) or ["full_attention"])
    unknown = sorted(types - _SUPPORTED_LAYERS)
    if unknown:
        raise NotImplementedError(
            f"varlen_forward: {type(trunk).__name__} has layer types {unknown}; packed forwards are built "
            f"for {sorted(_SUPPORTED_LAYERS)} (Qwen3.5 full attention and Gated DeltaNet) only"
        )
    layers = [
        m
        for m in trunk.modules()
        if getattr(m, "layer_type", None) == "linear_attention" and hasattr(m, "conv1d")
    ]
    if "linear_attention" in types and not layers:
        raise NotImplementedError(
            f"varlen_forward: {type(trunk).__name__} declares linear-attention layers but none is a Gated "
            "DeltaNet module (a 'conv1d' and layer_type 'linear_attention'); its packed forward is not built"
        )
    return layers


@contextlib.contextmanager
def varlen_forward(trunk: nn.Module, lengths: Sequence[int]) -> Iterator[None]:
    """Every forward of ``trunk`` inside the context runs its ``[1, n]`` input as packed sequences.

    The sequences are ``lengths`` in order (``N = sum(lengths)`` tokens). A forward over the first
    ``n < N`` tokens (the critic drops the last token of its input) covers the sequences clipped to them.
    Call the trunk with ``input_ids`` (or ``inputs_embeds``) as keyword, no ``position_ids``, no
    ``attention_mask`` and no cache; backward may run inside or after the context.

    Args:
        trunk: the decoder (`Qwen3_5MoeTextModel`: ``actor.model`` or ``critic.body``).
        lengths: tokens per sequence, each >= 1.

    Raises:
        ValueError: at entry, a bad ``lengths`` (`packed_position_ids`); before a forward, an input that is
            not one row of at most N tokens, or one that brings its own positions, mask or cache.
        NotImplementedError: at entry, a trunk with a layer type other than full attention and Gated
            DeltaNet (its packed forward is not built).
    """
    positions = packed_position_ids(lengths)
    total = int(positions.shape[0])
    gdn = _linear_attention_layers(trunk)
    layouts: dict[tuple[int, str], _PaddedLayout] = {}
    current: list[_PaddedLayout | None] = [None]

    def before_trunk(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
        x = kwargs.get("input_ids", kwargs.get("inputs_embeds"))
        if args or x is None:
            raise ValueError("varlen_forward: call the trunk with input_ids= (or inputs_embeds=) as keyword")
        for key in ("position_ids", "attention_mask", "cache", "past_key_values"):
            if kwargs.get(key) is not None:
                raise ValueError(f"varlen_forward: the packed forward sets its own positions; got {key}")
        if kwargs.get("use_cache"):
            raise ValueError("varlen_forward: a packed forward takes no cache (use_cache=False)")
        n = int(x.shape[1])
        if x.shape[0] != 1 or n > total:
            raise ValueError(
                f"varlen_forward: input of shape {tuple(x.shape[:2])}; a packed forward is one row of at "
                f"most {total} tokens (lengths {list(lengths)})"
            )
        clipped = _clipped(lengths, n)
        key = (n, str(x.device))
        if key not in layouts:
            layouts[key] = _PaddedLayout(clipped, x.device)
        current[0] = layouts[key] if len(clipped) > 1 else None
        kwargs["position_ids"] = positions[:n].to(x.device)[None]
        return args, kwargs

    def before_mixer(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
        layout = current[0]
        if layout is None:
            return args, kwargs
        if args:
            raise ValueError("varlen_forward: a Gated DeltaNet layer called with positional arguments")
        kwargs["hidden_states"] = layout.pad(kwargs["hidden_states"])
        kwargs["attention_mask"] = layout.mask
        return args, kwargs

    def after_mixer(module: nn.Module, args: Any, kwargs: Any, output: torch.Tensor) -> torch.Tensor:
        layout = current[0]
        return output if layout is None else layout.unpad(output)

    handles = [trunk.register_forward_pre_hook(before_trunk, with_kwargs=True)]
    try:
        for layer in gdn:
            handles.append(layer.register_forward_pre_hook(before_mixer, with_kwargs=True))
            handles.append(layer.register_forward_hook(after_mixer, with_kwargs=True))
        yield
    finally:
        for h in handles:
            h.remove()
