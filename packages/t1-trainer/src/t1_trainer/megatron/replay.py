"""R3 through megatron-core's own router replay, fed from T1's routing records (T1 §4.2).

megatron-core 0.19.2 (``megatron.core.transformer.moe.router_replay``): with ``moe_enable_routing_replay``
every ``TopKRouter`` owns a ``RouterReplay`` (also appended to the process-wide
``RouterReplay.global_router_replay_instances``, so an actor and a critic built in one process share that
list; T1 therefore feeds the instances of one model, found by `router_replay_instances`). Under
``REPLAY_FORWARD`` the router takes ``target_topk_idx`` ([tokens, k] int64) as its selection and gathers the
live scores at those experts, so the weights still carry gradients (for softmax routers with top-k before the
softmax: ``g_e = exp(s_e) / sum_{e' in I^r} exp(s_e')``, T1 §4.2). Every ``set_target_indices`` call also
appends to ``replay_backward_list``, which ``REPLAY_BACKWARD`` pops first-in first-out: activation
recomputation in backward then sees the micro-batches' records in the order their forwards ran. The fused
router (``moe_router_fusion``) bypasses replay upstream, so the backend must keep it off.

Token order is the router's: it flattens its ``[s, b, E]`` logits seq-major, row ``s * b_size + b``. Two
layouts are built: ``"thd"`` (packed sequences, batch 1: samples concatenated, each padded to a multiple of
``pad_to``) and ``"sbhd"`` (padded batch: every sample padded to the common length ``S``, rows seq-major).
With context parallelism (``cp_size`` > 1) a rank's router sees its load-balanced share first: of each
sample (``"thd"``) or of the common length (``"sbhd"``), cut into ``2 * cp`` chunks, chunks ``cp_rank`` and
``2 * cp - 1 - cp_rank`` (`t1_trainer.context_parallel.stream_positions`, the rule the backend shards its
tokens by).
With sequence parallelism it then sees one contiguous block of those rows per TP rank (``sp_rank``,
``sp_size``).

Rows without a record (each sample's last position, which the sampler never forwarded, and padding) take
`t1_r3.pad_rows`, distinct experts spread over all E with one running offset for the whole batch, so padding
never piles onto one expert's capacity (slime #822). Their outputs enter no loss: attention and Gated
DeltaNet are causal, so no recorded position reads them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from t1_r3 import RoutingMismatchError, check_routing, pad_rows
from t1_trainer.context_parallel import PackedCPDescriptor, stream_positions

__all__ = [
    "Layout",
    "RoutingReplayError",
    "clear_router_replay",
    "feed_router_replay",
    "moe_layer_order",
    "pending_backward",
    "replay_backward",
    "replay_targets",
    "router_replay_instances",
    "set_replay_action",
]

Layout = Literal["thd", "sbhd"]


class RoutingReplayError(RoutingMismatchError):
    """A routing record cannot be fed to megatron-core's router replay: missing, mis-shaped, or misplaced.

    A `t1_r3.RoutingMismatchError`, so T1's one routing error still catches it; the message names the sample
    (its index in the batch) and, where one is at fault, the MoE layer. Nothing is fed when it is raised.
    """


def _int(name: str, value: object, minimum: int) -> int:
    if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _as_array(record: Any) -> np.ndarray:
    if isinstance(record, torch.Tensor):
        return record.detach().cpu().numpy()
    return np.asarray(record)


def replay_targets(
    records: Sequence[Any],
    *,
    moe_layer_order: Sequence[int],
    seq_lens: Sequence[int],
    num_moe_layers: int,
    top_k: int,
    num_experts: int,
    pad_to: int | None = None,
    layout: Layout = "thd",
    sp_rank: int = 0,
    sp_size: int = 1,
    cp_rank: int = 0,
    cp_size: int = 1,
) -> list[torch.Tensor]:
    """The replay target of each local MoE router for one micro-batch: pure, no megatron import.

    Args:
        records: one routing record per sample, integer ``[T_i - 1, L_moe, k]`` (numpy or torch, any integer
            dtype), or None where a sample has none.
        moe_layer_order: for each local router, in instantiation order, its record column (MoE layer index
            in ``[0, L_moe)``); `moe_layer_order` computes it from the routers.
        seq_lens: tokens ``T_i`` of each sample in the forward (prompt and response, unpadded).
        num_moe_layers: L_moe of the model (record columns).
        top_k: k of the model.
        num_experts: E of the model.
        pad_to: ``"thd"``: each sample's row count is rounded up to a multiple of ``pad_to`` (Megatron's
            ``cu_seqlens_padded``); ``"sbhd"``: the common length is ``max(seq_lens)`` rounded up to it.
            None = 1.
        layout: ``"thd"`` (packed, batch 1) or ``"sbhd"`` (padded batch); see the module docstring.
        sp_rank: this rank's index in the sequence-parallel (TP) group.
        sp_size: sequence-parallel group size (tp with ``sequence_parallel``, else 1).
        cp_rank: this rank's index in the context-parallel group.
        cp_size: context-parallel group size; above 1 every sample's padded rows (``"thd"``) or the common
            length (``"sbhd"``) must be a multiple of ``2 * cp_size``.

    Returns:
        One int64 ``[rows, k]`` CPU tensor per entry of ``moe_layer_order``, rows in the router's token order
        for this rank.

    Raises:
        RoutingReplayError: a record is missing, is not ``[T_i - 1, num_moe_layers, top_k]``, holds ids
            outside ``[0, num_experts)``, repeats an expert or has an all-zero layer (`t1_r3.check_routing`),
            naming the sample; or the padded rows do not split into ``2 * cp_size`` chunks or over
            ``sp_size``.
        ValueError: bad arguments (lengths of ``records`` and ``seq_lens`` differ, a layer index out of range,
            unknown layout, ``sp_rank`` or ``cp_rank`` outside its group, a rank or size not an integer).
    """
    if layout not in ("thd", "sbhd"):
        raise ValueError(f"layout must be 'thd' or 'sbhd', got {layout!r}")
    num_moe_layers = _int("num_moe_layers", num_moe_layers, 1)
    top_k, num_experts = _int("top_k", top_k, 1), _int("num_experts", num_experts, 1)
    multiple = 1 if pad_to is None else _int("pad_to", pad_to, 1)
    sp_size = _int("sp_size", sp_size, 1)
    sp_rank = _int("sp_rank", sp_rank, 0)  # a fraction would slice between blocks
    if not sp_rank < sp_size:
        raise ValueError(f"sp_rank={sp_rank} is outside [0, sp_size={sp_size})")
    cp_size = _int("cp_size", cp_size, 1)
    cp_rank = _int("cp_rank", cp_rank, 0)  # a fraction would pass the range check, pick rows between chunks
    if not cp_rank < cp_size:
        raise ValueError(f"cp_rank={cp_rank} is outside [0, cp_size={cp_size})")
    order = [int(c) for c in moe_layer_order]
    if not order or len(set(order)) != len(order) or min(order) < 0 or max(order) >= num_moe_layers:
        raise ValueError(
            f"moe_layer_order {order} must be distinct MoE layer indices in [0, {num_moe_layers})"
        )
    if len(records) != len(seq_lens) or not records:
        raise ValueError(
            f"{len(records)} records for {len(seq_lens)} sequence lengths; one record per sample"
        )

    def padded(n: int) -> int:
        return -(-n // multiple) * multiple

    common = padded(max(int(t) for t in seq_lens)) if layout == "sbhd" else 0
    offset = 0  # one running pad offset (in cells) for the whole batch: padding spreads over all experts
    per_sample: list[np.ndarray] = []
    for i, (record, num_tokens) in enumerate(zip(records, seq_lens, strict=True)):
        num_tokens = _int(f"seq_lens[{i}]", num_tokens, 1)
        if record is None:
            raise RoutingReplayError(
                f"sample {i}: no routing record for its {num_tokens} tokens; replay fails closed (T1 §4.2, "
                "missing routing aborts the sample): drop the sample or re-sample it with routing on"
            )
        rec = _as_array(record)
        try:
            check_routing(
                rec,
                num_tokens=num_tokens,
                num_layers=num_moe_layers,
                top_k=top_k,
                num_experts=num_experts,
                where=f"sample {i}",
            )
        except RoutingMismatchError as exc:
            raise RoutingReplayError(str(exc)) from exc
        rows = padded(num_tokens) if layout == "thd" else common
        n_pad = rows - (num_tokens - 1)
        pad = pad_rows(n_pad, num_layers=num_moe_layers, top_k=top_k, num_experts=num_experts, offset=offset)
        offset += n_pad * num_moe_layers
        per_sample.append(np.concatenate([rec.astype(np.int64), pad.astype(np.int64)], axis=0))
    if layout == "thd":
        full = np.concatenate(per_sample, axis=0)
    else:  # [B, S, L, k] -> [S, B, L, k] -> rows s * B + b, as the router flattens [s, b, E]
        full = np.stack(per_sample, axis=0).transpose(1, 0, 2, 3).reshape(-1, num_moe_layers, top_k)
    if cp_size > 1:
        full = full[_cp_rows(per_sample, layout, cp_rank, cp_size)]
    if full.shape[0] % sp_size:
        raise RoutingReplayError(
            f"{full.shape[0]} routed rows do not split over sp_size={sp_size}; pad the batch to a multiple "
            f"(pad_to) as the sequence-parallel split requires"
        )
    block = full.shape[0] // sp_size
    local = full[sp_rank * block : (sp_rank + 1) * block]
    return [torch.from_numpy(np.ascontiguousarray(local[:, col, :])) for col in order]


def _cp_rows(per_sample: list[np.ndarray], layout: Layout, cp_rank: int, cp_size: int) -> np.ndarray:
    """Indices into the batch's rows of those a context-parallel rank routes, in its order."""
    lengths = [p.shape[0] for p in per_sample] if layout == "thd" else [per_sample[0].shape[0]]
    for i, n in enumerate(lengths):
        if n % (2 * cp_size):
            where = f"sample {i}" if layout == "thd" else "the common length"
            raise RoutingReplayError(
                f"{where}: {n} routed rows do not split into 2*cp_size = {2 * cp_size} load-balanced "
                f"chunks; pad each sample to a multiple (pad_to) as context parallelism requires"
            )
    desc = PackedCPDescriptor(
        cp=cp_size,
        lengths=tuple(lengths),
        real=(True,) * len(lengths),
        segments=(2 * cp_size,) * len(lengths),
    )
    pos = stream_positions(desc, cp_rank).numpy()
    if layout == "thd":
        return pos
    batch = len(per_sample)  # rows s * B + b: every sample's row at each of the rank's positions
    return (pos[:, None] * batch + np.arange(batch)[None, :]).reshape(-1)


def router_replay_instances(model: nn.Module) -> list[Any]:
    """The ``RouterReplay`` objects of one Megatron model, in module (= layer) order, one per local MoE layer.

    Looks at the model's own routers (``module.router_replay``), not the process-wide list, so a critic built
    in the same process is never fed the actor's records.

    Raises:
        RoutingReplayError: the model has no router with replay (``moe_enable_routing_replay`` is off).
    """
    found = [m.router_replay for m in model.modules() if getattr(m, "router_replay", None) is not None]
    if not found:
        raise RoutingReplayError(
            "the model has no MoE router with a RouterReplay; build it with moe_enable_routing_replay=True"
        )
    return found


def moe_layer_order(instances: Sequence[Any], *, moe_layers: Sequence[int] | None = None) -> list[int]:
    """The record column of each ``RouterReplay``, from its router's 1-based global ``layer_number``.

    Args:
        instances: from `router_replay_instances`.
        moe_layers: the decoder-layer index of each record column (`t1_r3.moe_layers`); None = every decoder
            layer is MoE (Qwen3.5-MoE), so column = ``layer_number - 1``.

    Raises:
        RoutingReplayError: an instance has no layer number yet, or its layer is not an MoE layer of the
            record, naming the layer.
    """
    where = None if moe_layers is None else {int(layer): col for col, layer in enumerate(moe_layers)}
    order = []
    for j, inst in enumerate(instances):
        number = getattr(inst, "layer_number", None)
        if number is None:
            raise RoutingReplayError(
                f"router replay instance {j} has no layer_number (the layer did not set it)"
            )
        layer = int(number) - 1
        if where is None:
            order.append(layer)
        elif layer in where:
            order.append(where[layer])
        else:
            raise RoutingReplayError(f"decoder layer {layer} routes but is not in the record's moe_layers")
    return order


def feed_router_replay(
    instances: Sequence[Any],
    records: Sequence[Any],
    *,
    moe_layer_order: Sequence[int],
    seq_lens: Sequence[int],
    num_moe_layers: int,
    top_k: int,
    num_experts: int,
    pad_to: int | None = None,
    layout: Layout = "thd",
    sp_rank: int = 0,
    sp_size: int = 1,
    cp_rank: int = 0,
    cp_size: int = 1,
    device: torch.device | str | None = None,
) -> list[torch.Tensor]:
    """Sets one micro-batch's replay targets on every local router (``RouterReplay.set_target_indices``).

    Call once per micro-batch before its forward, with the instances under ``REPLAY_FORWARD``
    (`set_replay_action`); each call also queues the targets for ``REPLAY_BACKWARD`` (`replay_backward`).
    Everything is built and checked before the first instance is touched.

    Args:
        instances: the model's ``RouterReplay`` objects (`router_replay_instances`).
        records: as in `replay_targets`.
        moe_layer_order: record column of each instance (`moe_layer_order`), same length as ``instances``.
        seq_lens: as in `replay_targets`.
        num_moe_layers: as in `replay_targets`.
        top_k: as in `replay_targets`.
        num_experts: as in `replay_targets`.
        pad_to: as in `replay_targets`.
        layout: as in `replay_targets`.
        sp_rank: as in `replay_targets`.
        sp_size: as in `replay_targets`.
        cp_rank: as in `replay_targets`.
        cp_size: as in `replay_targets`.
        device: where the targets live (the router's device); None = CPU (megatron moves them per forward).

    Returns:
        The targets fed, one int64 ``[rows, k]`` per instance.

    Raises:
        RoutingReplayError: ``len(instances) != len(moe_layer_order)``, or as `replay_targets`.
        ValueError: as `replay_targets`.
    """
    if len(instances) != len(moe_layer_order):
        raise RoutingReplayError(
            f"{len(instances)} router replay instances but moe_layer_order names "
            f"{len(moe_layer_order)} layers"
        )
    targets = replay_targets(
        records,
        moe_layer_order=moe_layer_order,
        seq_lens=seq_lens,
        num_moe_layers=num_moe_layers,
        top_k=top_k,
        num_experts=num_experts,
        pad_to=pad_to,
        layout=layout,
        sp_rank=sp_rank,
        sp_size=sp_size,
        cp_rank=cp_rank,
        cp_size=cp_size,
    )
    if device is not None:
        targets = [t.to(device) for t in targets]
    for inst, target in zip(instances, targets, strict=True):
        inst.set_target_indices(target)
    return targets


def _action(name: str) -> Any:
    from megatron.core.transformer.moe.router_replay import RouterReplayAction

    return RouterReplayAction[name]


def set_replay_action(instances: Sequence[Any], action: str | None) -> None:
    """Sets ``"REPLAY_FORWARD"``, ``"REPLAY_BACKWARD"`` or ``"RECORD"`` on the instances; None = route live.

    Raises:
        KeyError: an unknown action name.
    """
    for inst in instances:
        if action is None:
            inst.clear_router_replay_action()
        else:
            inst.set_router_replay_action(_action(action))


@contextlib.contextmanager
def replay_backward(instances: Sequence[Any]) -> Iterator[None]:
    """Runs the body (a backward with activation recomputation) under ``REPLAY_BACKWARD``; restores after.

    Each recomputed router forward pops its instance's oldest queued target, so recomputation routes like
    the micro-batch's forward did.
    """
    before = [inst.router_replay_action for inst in instances]
    set_replay_action(instances, "REPLAY_BACKWARD")
    try:
        yield
    finally:
        for inst, action in zip(instances, before, strict=True):
            inst.router_replay_action = action


def pending_backward(instances: Sequence[Any]) -> list[int]:
    """Targets still queued for ``REPLAY_BACKWARD`` per instance (all equal after a consistent step)."""
    return [len(inst.replay_backward_list) for inst in instances]


def clear_router_replay(instances: Sequence[Any]) -> None:
    """Drops every target, queued backward target and action: call after each optimizer step."""
    for inst in instances:
        inst.clear_indices()
        inst.clear_router_replay_action()
