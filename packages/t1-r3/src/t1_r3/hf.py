"""Capture and replay of MoE routing on `transformers` models of every registered family (T1 §4.2).

Both hook the MoE routers of `t1_r3.families` (Qwen3.5-MoE, Qwen3-MoE, Qwen2-MoE, Mixtral, OLMoE,
DeepSeek-V3), found in layer order, one per MoE layer; dense layers have no router and no record column.

* Capture (the sampler's side) records each router's selected ``indices`` of every forward, in token order,
  in the compact dtype of `t1_r3.routing_dtype`.
* Replay (the trainer's side) replaces the selection with the record and recomputes the weights from the live
  logits with the family's formula restricted to the recorded experts, T1 §4.2:
  ``g_e = exp(s_e) / sum_{e' in I^r} exp(s_e')`` for ``e in I^r``, so the router still receives gradients.
  The last position, which the sampler never forwarded, routes live. A record equal to the live top-k
  therefore gives bit-identical logits at every position (same ops, same order, same expert groupings).

Replay is keyed by layer, not by a FIFO cursor: every forward inside the context covers the same sequence, so
an old-log-prob pass, the training pass and activation recomputation in backward all see the same record.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from t1_r3.families import MoeRouter, find_routers
from t1_r3.records import RoutingMismatchError, check_routing, routing_dtype

__all__ = [
    "RoutingRecorder",
    "capture_routing",
    "moe_layers",
    "moe_routers",
    "replay_routing",
    "replay_routing_packed",
]

_REPLAY_FLAG = "_t1_r3_replay_active"


def moe_routers(model: nn.Module) -> list[nn.Module]:
    """The MoE router modules of ``model`` in layer order, one per MoE layer (`t1_r3.families`).

    Raises:
        ValueError: no registered router family in the model (see `t1_r3.families.find_routers`).
    """
    return [r.module for r in find_routers(model)]


def moe_layers(model: nn.Module) -> list[int]:
    """The decoder-layer index of each record column: ``[first_k_dense_replace, ..., L - 1]`` for DeepSeek-V3.

    Pass it as ``moe_layers`` to `t1_r3.decode_routed_experts` so SGLang's zero-filled dense columns are
    dropped. Equals ``range(num_hidden_layers)`` when every layer is MoE (Qwen3.5-MoE, Mixtral, OLMoE).

    Raises:
        ValueError: as `moe_routers`.
    """
    return [r.layer for r in find_routers(model)]


class RoutingRecorder:
    """Collects the experts each router selected, per MoE layer, in the order tokens went through the model.

    Args:
        num_layers: MoE layers (record columns).
        top_k: experts per token.
        num_experts: E; picks the compact dtype of the record (`t1_r3.routing_dtype`); None = int32.
    """

    def __init__(self, num_layers: int, top_k: int, num_experts: int | None = None) -> None:
        self.num_layers = num_layers
        self.top_k = top_k
        self.dtype = np.dtype(np.int32) if num_experts is None else routing_dtype(num_experts)
        # torch has full uint8 support; wider compact dtypes are held as int32 and narrowed in `rows`
        self._torch_dtype = torch.uint8 if self.dtype == np.uint8 else torch.int32
        self._per_layer: list[list[torch.Tensor]] = [[] for _ in range(num_layers)]

    def _record(self, layer: int, indices: torch.Tensor) -> None:
        self._per_layer[layer].append(indices.detach().to(device="cpu", dtype=self._torch_dtype))

    @property
    def tokens_seen(self) -> int:
        """Tokens recorded so far (rows of `rows`)."""
        return sum(t.shape[0] for t in self._per_layer[0]) if self.num_layers else 0

    def rows(self) -> np.ndarray:
        """The record so far: ``[tokens_seen, L, k]`` in the compact dtype, rows in forward order.

        The dtype is ``routing_dtype(num_experts)`` (uint8 for E <= 256: one byte per expert id) or int32 when
        the recorder was made without E. A batched forward ``[B, T]`` contributes its rows batch-major
        (``b * T + t``).

        Raises:
            RoutingMismatchError: layers saw different token counts (a forward raised half-way).
        """
        counts = [sum(t.shape[0] for t in chunks) for chunks in self._per_layer]
        if len(set(counts)) > 1:
            raise RoutingMismatchError(f"capture is incomplete: tokens seen per layer {counts} differ")
        if counts[0] == 0:
            return np.zeros((0, self.num_layers, self.top_k), dtype=self.dtype)
        per_layer = [torch.cat(chunks, dim=0) for chunks in self._per_layer]
        return torch.stack(per_layer, dim=1).numpy().astype(self.dtype, copy=False)

    def clear(self) -> None:
        """Forgets everything recorded so far."""
        self._per_layer = [[] for _ in range(self.num_layers)]


@contextlib.contextmanager
def capture_routing(model: nn.Module) -> Iterator[RoutingRecorder]:
    """Records the routing of every forward of ``model`` inside the context.

    Works for every family of `t1_r3.ROUTER_FAMILIES`, for a prefill of many tokens and for token-by-token
    decode with a KV/state cache alike: rows are appended in the order tokens go through the model. Dense
    layers have no router and no column. Hooks are removed on exit, also on exceptions.

    Args:
        model: an HF MoE model (see `moe_routers`).

    Yields:
        A `RoutingRecorder`; ``recorder.rows()`` is ``[tokens_seen, L_moe, k]`` in the compact dtype of
        `t1_r3.routing_dtype` (uint8 for E <= 256).
    """
    routers = find_routers(model)
    first = routers[0].module
    recorder = RoutingRecorder(len(routers), int(first.top_k), int(first.num_experts))
    handles = []

    def make_hook(layer: int) -> Any:
        def hook(module: nn.Module, args: Any, output: tuple[torch.Tensor, ...]) -> None:
            recorder._record(layer, output[2])

        return hook

    try:
        for layer, router in enumerate(routers):
            handles.append(router.module.register_forward_hook(make_hook(layer)))
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


def _record_of(
    routing: torch.Tensor | np.ndarray, num_layers: int, top_k: int, num_experts: int
) -> np.ndarray:
    """One sample's record as numpy ``[T-1, L, k]``, checked against the model's routers."""
    rec = routing.detach().cpu().numpy() if isinstance(routing, torch.Tensor) else np.asarray(routing)
    if rec.ndim != 3:
        raise RoutingMismatchError(f"routing must be [T-1, L, k]; got shape {rec.shape}")
    check_routing(
        rec, num_tokens=rec.shape[0] + 1, num_layers=num_layers, top_k=top_k, num_experts=num_experts
    )
    return rec


@contextlib.contextmanager
def replay_routing(model: nn.Module, routing: torch.Tensor | np.ndarray) -> Iterator[None]:
    """Replays a recorded routing in every forward of ``model`` inside the context (T1 §4.2, R3).

    Each MoE router takes its SELECTION from ``routing`` and its WEIGHTS from its live logits with its
    family's formula restricted to the recorded experts (`t1_r3.families`; for softmax routers
    ``g_e = exp(s_e) / sum_{e' in I^r} exp(s_e')``), so gradients reach the router weights. The record is
    ``[T-1, L_moe, k]`` for a forward over T tokens (the last token never went through the sampler's
    forward); the last position routes live, which is harmless because its output enters no loss, and makes
    a replayed record equal to the live top-k give bit-identical logits at every position.

    Outside the context the model routes live: the critic, the frozen reference policy and the trainer's
    live-routing gap measurement never replay (T1 appendix: the reference routes with its own TopK).

    Scope: batch-1 forwards ``[1, T]`` from position 0 (the trainer feeds one sample at a time); every forward
    in the context must cover the same T tokens. Run ``backward()`` inside the context when activation
    recomputation is on, so recomputed routers replay too. Several samples packed in one row replay with
    `replay_routing_packed`; a padded ``[B, T]`` batch is not built.

    Args:
        model: an HF MoE model of a registered family (see `moe_routers`).
        routing: integer ``[T-1, L_moe, k]`` (numpy or torch; compact uint8 / uint16 or wider), e.g. from
            `decode_routed_experts` or `capture_routing`.

    Raises:
        RoutingMismatchError: at entry, when the record's layer count, top-k or expert ids do not fit the
            model (see `check_routing`); before a forward, when its input is not ``T = rows + 1`` tokens from
            position 0. Nothing is computed with a misaligned record.
        NotImplementedError: a forward with batch size > 1 (batched replay not built yet).
        RuntimeError: replay is already active on this model (nested replay).
    """
    with _replay(model, [routing]):
        yield


@contextlib.contextmanager
def replay_routing_packed(model: nn.Module, routings: Sequence[torch.Tensor | np.ndarray]) -> Iterator[None]:
    """`replay_routing` of several samples packed in one row ``[1, sum T_i]`` (T1 §4.2, R3).

    Sample i's record ``[T_i-1, L_moe, k]`` replays on its own tokens, which follow sample i-1's in the
    row; each sample's last position routes live, as in `replay_routing` (its output enters no loss, and in
    a packed forward no later sample sees it: `t1_policy.varlen.varlen_forward`). With one record this is
    `replay_routing` exactly.

    Args:
        model: an HF MoE model of a registered family (see `moe_routers`).
        routings: one record per packed sample, in row order.

    Raises:
        RoutingMismatchError: as `replay_routing`, per record at entry; before a forward, an input that is not
            ``sum T_i`` tokens from position 0.
        NotImplementedError: a forward with batch size > 1.
        RuntimeError: replay is already active on this model.
        ValueError: no record given.
    """
    if not routings:
        raise ValueError("replay_routing_packed: no routing record given")
    with _replay(model, list(routings)):
        yield


@contextlib.contextmanager
def _replay(model: nn.Module, routings: list[torch.Tensor | np.ndarray]) -> Iterator[None]:
    """The replay hooks of `replay_routing` over one or more records packed in row order."""
    routers = find_routers(model)
    first = routers[0].module
    num_layers, top_k, num_experts = len(routers), int(first.top_k), int(first.num_experts)
    records = [_record_of(r, num_layers, top_k, num_experts) for r in routings]
    num_tokens = sum(rec.shape[0] + 1 for rec in records)
    rows_desc = (
        f"{records[0].shape[0]} rows cover a {num_tokens}-token forward from position 0"
        if len(records) == 1
        else f"{len(records)} packed records cover a {num_tokens}-token forward from position 0"
    )
    device = first.weight.device
    # one row per packed token: the record's rows, then a placeholder (0) at each sample's live last position
    rows = np.concatenate(
        [np.concatenate([rec, np.zeros((1, num_layers, top_k), rec.dtype)]) for rec in records]
    )
    live = torch.zeros(num_tokens, 1, dtype=torch.bool, device=device)
    live[torch.as_tensor(np.cumsum([rec.shape[0] + 1 for rec in records]) - 1, device=device)] = True
    per_layer = [
        torch.from_numpy(np.ascontiguousarray(rows[:, layer, :])).to(device=device, dtype=torch.long)
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
                "[1, T] at a time, or several packed in one row (replay_routing_packed)"
            )
        if seq != num_tokens or _cached_tokens(kwargs):
            raise RoutingMismatchError(
                f"forward over {seq} tokens (plus {_cached_tokens(kwargs)} cached) does not match the "
                f"routing record: {rows_desc}"
            )

    def make_hook(layer: int, router: MoeRouter) -> Any:
        def hook(module: nn.Module, args: Any, output: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
            logits, live_idx = output[0], output[2]
            recorded = per_layer[layer]
            if logits.shape[0] != recorded.shape[0]:
                raise RoutingMismatchError(
                    f"MoE layer {layer} (decoder layer {router.layer}) routes {logits.shape[0]} tokens but "
                    f"the record covers {recorded.shape[0] - len(records)} + {len(records)}; replay needs a "
                    "batch-1 forward over the recorded sequence"
                )
            # each sample's last position was never forwarded by the sampler: it keeps its live selection
            idx = torch.where(live, live_idx.to(recorded.dtype), recorded)
            return logits, router.family.weights(module, logits, idx), idx.to(live_idx.dtype)

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
            handles.append(router.module.register_forward_hook(make_hook(layer, router)))
        yield
    finally:
        for h in handles:
            h.remove()
        setattr(model, _REPLAY_FLAG, False)
