"""Capture and replay of MoE routing on `transformers` models (Qwen3.5-MoE and siblings) (T1 §4.2).

Both hook the MoE routers (`...TopKRouter`, the ``.gate`` of every `...SparseMoeBlock`), found in layer order.
Such a router maps hidden states ``[N, H]`` to ``(router_logits [N, E], router_scores [N, k],
router_indices [N, k])``: softmax over all E logits, top-k, weights renormalised over the k.

* Capture (the sampler's side) records ``router_indices`` of every forward, in token order.
* Replay (the trainer's side) replaces the selection with the record and recomputes the weights from the live
  logits restricted to the recorded experts, T1 §4.2:
  ``g_e = exp(s_e) / sum_{e' in I^r} exp(s_e')`` for ``e in I^r``, so the router still receives gradients.
  When the record equals the live top-k, a router given the same input returns bit-identical weights (same ops
  in the same order), but the whole forward agrees only to float32 rounding (~1e-7 in logits and log-probs):
  the padded last row changes which tokens each expert's matmul groups, so later routers' inputs differ.

Replay is keyed by layer, not by a FIFO cursor: every forward inside the context covers the same sequence, so
an old-log-prob pass, the training pass and activation recomputation in backward all see the same record.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import nn

from t1_r3.records import RoutingMismatchError, check_routing, pad_rows

__all__ = ["RoutingRecorder", "capture_routing", "moe_routers", "replay_routing"]

_REPLAY_FLAG = "_t1_r3_replay_active"


def moe_routers(model: nn.Module) -> list[nn.Module]:
    """The MoE top-k routers of ``model`` in layer order (module registration order).

    Raises:
        ValueError: the model has no router with ``top_k`` and ``num_experts`` (not an HF MoE model).
    """
    routers = [
        m
        for m in model.modules()
        if type(m).__name__.endswith("TopKRouter") and hasattr(m, "top_k") and hasattr(m, "num_experts")
    ]
    if not routers:
        raise ValueError(
            f"{type(model).__name__} has no MoE top-k router (a module named *TopKRouter with top_k and "
            "num_experts); routing capture and replay need an HF MoE model such as Qwen3_5MoeForCausalLM"
        )
    return routers


class RoutingRecorder:
    """Collects the experts each router selected, per layer, in the order tokens went through the model."""

    def __init__(self, num_layers: int, top_k: int) -> None:
        self.num_layers = num_layers
        self.top_k = top_k
        self._per_layer: list[list[torch.Tensor]] = [[] for _ in range(num_layers)]

    def _record(self, layer: int, indices: torch.Tensor) -> None:
        self._per_layer[layer].append(indices.detach().to(device="cpu", dtype=torch.int32))

    @property
    def tokens_seen(self) -> int:
        """Tokens recorded so far (rows of `rows`)."""
        return sum(t.shape[0] for t in self._per_layer[0]) if self.num_layers else 0

    def rows(self) -> np.ndarray:
        """The record so far: int32 ``[tokens_seen, L, k]``, rows in the order tokens were forwarded.

        A batched forward ``[B, T]`` contributes its rows batch-major (``b * T + t``).

        Raises:
            RoutingMismatchError: layers saw different token counts (a forward raised half-way).
        """
        counts = [sum(t.shape[0] for t in chunks) for chunks in self._per_layer]
        if len(set(counts)) > 1:
            raise RoutingMismatchError(f"capture is incomplete: tokens seen per layer {counts} differ")
        if counts[0] == 0:
            return np.zeros((0, self.num_layers, self.top_k), dtype=np.int32)
        per_layer = [torch.cat(chunks, dim=0) for chunks in self._per_layer]
        return torch.stack(per_layer, dim=1).numpy()

    def clear(self) -> None:
        """Forgets everything recorded so far."""
        self._per_layer = [[] for _ in range(self.num_layers)]


@contextlib.contextmanager
def capture_routing(model: nn.Module) -> Iterator[RoutingRecorder]:
    """Records the routing of every forward of ``model`` inside the context.

    Works for a prefill of many tokens and for token-by-token decode with a KV/state cache alike: rows are
    appended in the order tokens go through the model. Hooks are removed on exit, also on exceptions.

    Args:
        model: an HF MoE model (see `moe_routers`).

    Yields:
        A `RoutingRecorder`; ``recorder.rows()`` is int32 ``[tokens_seen, L, k]``.
    """
    routers = moe_routers(model)
    recorder = RoutingRecorder(len(routers), int(routers[0].top_k))
    handles = []

    def make_hook(layer: int) -> Any:
        def hook(module: nn.Module, args: Any, output: tuple[torch.Tensor, ...]) -> None:
            recorder._record(layer, output[2])

        return hook

    try:
        for layer, router in enumerate(routers):
            handles.append(router.register_forward_hook(make_hook(layer)))
        yield recorder
    finally:
        for h in handles:
            h.remove()


def _input_shape(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, int] | None:
    ids = kwargs.get("input_ids", args[0] if args else None)
    if isinstance(ids, torch.Tensor) and ids.ndim == 2:
        return int(ids.shape[0]), int(ids.shape[1])
    embeds = kwargs.get("inputs_embeds")
    if isinstance(embeds, torch.Tensor) and embeds.ndim == 3:
        return int(embeds.shape[0]), int(embeds.shape[1])
    return None


def _cached_tokens(kwargs: dict[str, Any]) -> int:
    cache = kwargs.get("cache", kwargs.get("past_key_values"))
    if cache is None or not hasattr(cache, "get_seq_length"):
        return 0
    try:
        return int(cache.get_seq_length())
    except ValueError:  # a cache of linear-attention layers only has no sequence length
        return 0


@contextlib.contextmanager
def replay_routing(model: nn.Module, routing: torch.Tensor | np.ndarray) -> Iterator[None]:
    """Replays a recorded routing in every forward of ``model`` inside the context (T1 §4.2, R3).

    Each MoE router takes its SELECTION from ``routing`` and its WEIGHTS from the live router logits
    renormalised over the recorded experts, ``g_e = exp(s_e) / sum_{e' in I^r} exp(s_e')``, so gradients
    reach the router weights. The record is ``[T-1, L, k]`` for a forward over T tokens (the last token never
    went through the sampler's forward); its missing last row is padded with distinct experts (`pad_rows`),
    harmless because the last position's output enters no loss.

    Scope: batch-1 forwards ``[1, T]`` from position 0 (the trainer feeds one sample at a time); every forward
    in the context must cover the same T tokens. Run ``backward()`` inside the context when activation
    recomputation is on, so recomputed routers replay too. Batched (padded or packed) replay is not built.

    Args:
        model: an HF MoE model (see `moe_routers`).
        routing: integer ``[T-1, L, k]`` (numpy or torch), e.g. from `decode_routed_experts`.

    Raises:
        RoutingMismatchError: at entry, when the record's layer count, top-k or expert ids do not fit the
            model (see `check_routing`); before a forward, when its input is not ``T = rows + 1`` tokens from
            position 0. Nothing is computed with a misaligned record.
        NotImplementedError: a forward with batch size > 1 (batched replay not built yet).
        RuntimeError: replay is already active on this model (nested replay).
    """
    routers = moe_routers(model)
    num_layers, top_k, num_experts = len(routers), int(routers[0].top_k), int(routers[0].num_experts)
    rec = routing.detach().cpu().numpy() if isinstance(routing, torch.Tensor) else np.asarray(routing)
    if rec.ndim != 3:
        raise RoutingMismatchError(f"routing must be [T-1, L, k]; got shape {rec.shape}")
    check_routing(
        rec, num_tokens=rec.shape[0] + 1, num_layers=num_layers, top_k=top_k, num_experts=num_experts
    )
    num_tokens = rec.shape[0] + 1
    full = np.concatenate(
        [rec, pad_rows(1, num_layers=num_layers, top_k=top_k, num_experts=num_experts)], axis=0
    )
    device = routers[0].weight.device
    per_layer = [
        torch.from_numpy(np.ascontiguousarray(full[:, layer, :])).long().to(device)
        for layer in range(num_layers)
    ]

    def pre_forward(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        shape = _input_shape(args, kwargs)
        if shape is None:
            return  # unknown wrapper signature: the per-router check below still guards the forward
        batch, seq = shape
        if batch != 1:
            raise NotImplementedError(
                f"batched routing replay not built yet: got a forward over batch {batch}; feed one sample "
                "[1, T] at a time"
            )
        if seq != num_tokens or _cached_tokens(kwargs):
            raise RoutingMismatchError(
                f"forward over {seq} tokens (plus {_cached_tokens(kwargs)} cached) does not match the "
                f"routing "
                f"record: {rec.shape[0]} rows cover a {num_tokens}-token forward from position 0"
            )

    def make_hook(layer: int) -> Any:
        def hook(module: nn.Module, args: Any, output: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
            logits = output[0]
            idx = per_layer[layer]
            if logits.shape[0] != idx.shape[0]:
                raise RoutingMismatchError(
                    f"MoE layer {layer} routes {logits.shape[0]} tokens but the record covers {idx.shape[0]} "
                    "(rows + 1); replay needs a batch-1 forward over the recorded sequence"
                )
            # Same ops, same order as the live router: float softmax over all E, then renormalise over the k.
            probs = torch.softmax(logits, dtype=torch.float, dim=-1)
            top = probs.gather(1, idx)
            top = top / top.sum(dim=-1, keepdim=True)
            return logits, top.to(logits.dtype), idx

        return hook

    if getattr(model, _REPLAY_FLAG, False):
        raise RuntimeError("replay_routing is already active on this model; nested replay is not supported")
    handles = []
    try:
        setattr(model, _REPLAY_FLAG, True)
        # Check at the entry the caller uses: the whole model, or its base model (trainers often call
        # `model.model(...)` and apply the LM head themselves).
        entries = [model] + [m for m in model.modules() if m is not model and hasattr(m, "embed_tokens")]
        for entry in entries:
            handles.append(entry.register_forward_pre_hook(pre_forward, with_kwargs=True))
        for layer, router in enumerate(routers):
            handles.append(router.register_forward_hook(make_hook(layer)))
        yield
    finally:
        for h in handles:
            h.remove()
        setattr(model, _REPLAY_FLAG, False)
