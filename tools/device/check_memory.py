"""Memory readings of the device check and the capacity model's prediction beside them (T1 §7.1, Eq. 21).

`Memory` reads the CUDA caching allocator (every reading is None off CUDA: nothing is estimated instead);
`PhaseRecorder` marks the trainer's phases (update start, the optimizer's step hooks, update end);
`memory_table` sets each measured term beside the matching Eq. 21 terms of `predicted_terms`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

GIB = float(1 << 30)

TORCH_FP32_BYTES = {
    "weight_bytes": 4.0,
    "grad_bytes": 4.0,
    "optimizer_bytes": 8.0,
    "logit_bytes": 12.0,
    "logit_rows": 256,
}
"""Bytes of the torch backend in float32 (`t1_capacity.layouts.backend_constants("torch", "float32", ...)`):
fp32 weights, fp32 grads, AdamW m and v (no master copy) per parameter; one LM-head chunk of at most 256
rows, 12 B per logit (the chunk and two fp32 copies)."""


def megatron_bytes(dtype: str) -> dict[str, float]:
    """Bytes of the megatron backend as `t1_trainer.megatron` configures it, for weights in ``dtype``.

    ``grad_reduce_in_fp32``: 4 B gradients in DDP's buffer; Adam m and v 8 B; bf16 weights add a 4 B fp32
    main copy held by the distributed optimizer (Eq. 21's ``6 + 12/d`` layout at d = 1); float32 weights
    have no main copy. Logits as Eq. 21 prices them (the whole wall), in the weight dtype.
    """
    if dtype == "bfloat16":
        return {
            "weight_bytes": 2.0,
            "grad_bytes": 4.0,
            "optimizer_bytes": 12.0,
            "logit_bytes": 2.0,
            "logit_rows": None,
        }
    if dtype == "float32":
        return {
            "weight_bytes": 4.0,
            "grad_bytes": 4.0,
            "optimizer_bytes": 8.0,
            "logit_bytes": 4.0,
            "logit_rows": None,
        }
    raise ValueError(f"megatron_bytes: dtype {dtype!r} is neither bfloat16 nor float32")


class Memory:
    """Allocator readings on one device; every reading is None off CUDA (nothing is estimated instead)."""

    def __init__(self, device: Any) -> None:
        import torch

        self.torch = torch
        self.device = device
        self.cuda = device.type == "cuda"

    def allocated(self) -> int | None:
        """Bytes held by live tensors now (after a device sync)."""
        if not self.cuda:
            return None
        self.torch.cuda.synchronize(self.device)
        return int(self.torch.cuda.memory_allocated(self.device))

    def peak(self) -> int | None:
        """Largest ``allocated`` since the last `reset`, bytes."""
        if not self.cuda:
            return None
        self.torch.cuda.synchronize(self.device)
        return int(self.torch.cuda.max_memory_allocated(self.device))

    def reset(self) -> None:
        """Starts a new peak window (the overall peaks since `start_overall` keep counting)."""
        if self.cuda:
            self._fold()
            self.torch.cuda.reset_peak_memory_stats(self.device)

    def start_overall(self) -> None:
        """Starts the window of `overall_peak` and `overall_reserved_peak`, and a new peak window.

        The peak of the window open until now is dropped, not folded in: a run that follows a larger one
        (the check's runs share one process) must not report the earlier run's peak as its own.
        """
        self._overall = [0, 0]
        if self.cuda:
            self.torch.cuda.synchronize(self.device)
            self.torch.cuda.reset_peak_memory_stats(self.device)

    def _fold(self) -> None:
        self.torch.cuda.synchronize(self.device)
        peaks = (
            self.torch.cuda.max_memory_allocated(self.device),
            self.torch.cuda.max_memory_reserved(self.device),
        )
        self._overall = [
            max(a, int(b)) for a, b in zip(getattr(self, "_overall", [0, 0]), peaks, strict=True)
        ]

    def overall_peak(self) -> int | None:
        """Largest allocated bytes since `start_overall`, across every peak window."""
        if not self.cuda:
            return None
        self._fold()
        return self._overall[0]

    def overall_reserved_peak(self) -> int | None:
        """Largest bytes reserved by the caching allocator since `start_overall`."""
        if not self.cuda:
            return None
        self._fold()
        return self._overall[1]


def diff(a: int | None, b: int | None) -> int | None:
    """``a - b``, or None when either reading is missing."""
    return None if a is None or b is None else a - b


class PhaseRecorder:
    """Readings around the trainer's phases: the update calls and each optimizer's step hooks.

    ``marks[name]`` holds ``{"alloc": bytes, "peak": bytes}`` for ``<network>/start`` (entering the update
    call, peak window reset), ``<network>/pre_step`` (the optimizer's step pre-hook: weights + gradients live,
    activations freed; ``peak`` is the forward/backward peak), ``<network>/post_step`` (optimizer state
    allocated) and ``<network>/end`` (the update call returned). Off CUDA every reading is None.
    """

    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self.marks: dict[str, dict[str, int | None]] = {}

    def mark(self, name: str) -> None:
        """Records the current and peak allocation under ``name``, the first time only.

        With ``ppo_epochs > 1`` the optimizer steps again on state it already holds; the first step is the
        one that allocates gradients and optimizer state, so later passes do not overwrite its readings.
        """
        if name not in self.marks:
            self.marks[name] = {"alloc": self.memory.allocated(), "peak": self.memory.peak()}

    def wrap_update(self, backend: Any, method: str, network: str) -> None:
        """Replaces ``backend.<method>`` by one that marks ``<network>/start`` and ``/end``."""
        inner = getattr(backend, method)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self.memory.reset()
            self.mark(f"{network}/start")
            out = inner(*args, **kwargs)
            self.mark(f"{network}/end")
            return out

        setattr(backend, method, wrapped)

    def hook_optimizer(self, optimizer: Any, network: str) -> bool:
        """Marks ``<network>/pre_step`` and ``/post_step`` around the torch optimizer(s) inside ``optimizer``.

        ``optimizer`` is a ``torch.optim.Optimizer`` (the torch backend) or megatron's optimizer, whose
        ``optimizer`` attribute, or each of whose ``chained_optimizers``, holds the torch one that steps.
        The first pre-hook to fire marks ``pre_step``; ``post_step`` is the first post-hook's reading (the
        torch backend's one optimizer). False when no torch optimizer is found.
        """
        found = torch_optimizers(optimizer)
        for opt in found:
            opt.register_step_pre_hook(lambda *_: self.mark(f"{network}/pre_step"))
            opt.register_step_post_hook(lambda *_: self.mark(f"{network}/post_step"))
        return bool(found)

    def get(self, name: str, key: str) -> int | None:
        """One reading, or None when it was not taken (or off CUDA)."""
        return self.marks.get(name, {}).get(key)


def torch_optimizers(optimizer: Any) -> list[Any]:
    """The ``torch.optim.Optimizer`` s that step inside ``optimizer`` (itself, megatron's inner ones)."""
    import torch

    if isinstance(optimizer, torch.optim.Optimizer):
        return [optimizer]
    out = []
    for part in getattr(optimizer, "chained_optimizers", None) or [optimizer]:
        inner = getattr(part, "optimizer", None)
        if isinstance(inner, torch.optim.Optimizer):
            out.append(inner)
    return out


class BuildRecorder:
    """Allocation growth of each megatron network's build and of its DDP + optimizer, while in ``with``.

    Wraps ``t1_trainer.megatron.model.build_gpt`` (first call: the actor, second: the critic) and
    ``MegatronBackend._optimizer`` for the body's duration, then restores both. ``placed`` maps ``actor``,
    ``critic`` (weights built on the device) and ``actor_grads``, ``critic_grads`` (DDP's grad buffer and
    the optimizer's main parameters) to bytes; None off CUDA.
    """

    def __init__(self, memory: Memory, backend_cls: Any) -> None:
        self.memory = memory
        self.cls = backend_cls
        self.placed: dict[str, int | None] = {}

    def __enter__(self) -> BuildRecorder:
        from t1_trainer.megatron import model

        self._model, self._build, self._opt = model, model.build_gpt, self.cls._optimizer
        rec = self

        def build_gpt(*args: Any, **kwargs: Any) -> Any:
            before = rec.memory.allocated()
            out = rec._build(*args, **kwargs)
            rec.placed["critic" if "actor" in rec.placed else "actor"] = diff(rec.memory.allocated(), before)
            return out

        def optimizer(backend: Any, name: str, lr: float) -> Any:
            before = rec.memory.allocated()
            out = rec._opt(backend, name, lr)
            rec.placed[f"{name}_grads"] = diff(rec.memory.allocated(), before)
            return out

        model.build_gpt = build_gpt
        self.cls._optimizer = optimizer
        return self

    def __exit__(self, *exc: object) -> None:
        self._model.build_gpt = self._build
        self.cls._optimizer = self._opt


def _term(predicted_bytes: float, measured_bytes: int | None) -> dict[str, float | None]:
    """One row of the memory table, GiB: predicted, measured (None: not measured), measured / predicted."""
    measured = None if measured_bytes is None else measured_bytes / GIB
    ratio = None if measured_bytes is None or predicted_bytes <= 0 else measured_bytes / predicted_bytes
    return {"predicted_gib": predicted_bytes / GIB, "measured_gib": measured, "ratio": ratio}


def predicted_terms(recipe: Any, token_wall: int, bytes_layout: dict[str, float]) -> dict[str, Any]:
    """The capacity model's per-term prediction for the recipe's plan at ``token_wall`` tokens (Eq. 21).

    Args:
        recipe: the validated recipe; its model, plan (degrees, alpha, b0) and offload mode are priced as
            `t1_capacity.from_recipe` reads them (the same path as ``tools/check_plan``).
        token_wall: the longest micro-batch the step actually trained, tokens (replaces ``plan.token_wall``,
            so prediction and measurement concern the same sequence length).
        bytes_layout: ``weight_bytes``, ``grad_bytes``, ``optimizer_bytes``, ``logit_bytes`` of the backend
            that trains (empty: Eq. 21's bf16 / Megatron defaults).

    Returns:
        ``{"actor": Footprint, "critic": Footprint, "needed_gib": float, "constants": dict}``; ``needed_gib``
        is what the admission rule requires of M (co-resident total under ``offload: none``).
    """
    from t1_capacity import ACTOR, CRITIC, footprint, from_recipe
    from t1_capacity.check import admission

    inputs = from_recipe(recipe)
    plan = dataclasses.replace(inputs.plan, token_wall=int(token_wall))
    consts = dataclasses.replace(inputs.constants, **bytes_layout)
    return {
        "actor": footprint(inputs.model, plan, consts, ACTOR),
        "critic": footprint(inputs.model, plan, consts, CRITIC),
        "needed_gib": admission(inputs.model, plan, consts).needed_gib,
        "constants": {**dataclasses.asdict(consts), "token_wall": plan.token_wall, "offload": plan.offload},
    }


def memory_table(
    pred: dict[str, Any], rec: PhaseRecorder, placed: dict[str, int | None], *, backend: str = "torch"
) -> dict[str, Any]:
    """Sets every measured phase beside its Eq. 21 terms; GiB, measured None where not measured.

    Measured, per network, on the torch backend: ``weights`` = allocation growth when the network was placed
    on the device; ``grads`` = allocation at the optimizer's pre-step hook minus at the update's start;
    ``optimizer`` = growth across the first optimizer step (AdamW allocates its state there);
    ``activations`` = the forward/backward peak above the pre-step allocation (activations, the logit chunks
    and autograd temporaries above weights + gradients). Predicted: the sums of the matching Eq. 21 terms.

    On the megatron backend (``backend="megatron"``) the gradients live in DDP's buffer, allocated with the
    optimizer's fp32 main parameters when the backend is built: ``grads`` = growth across building DDP and
    the optimizer (``placed["<net>_grads"]``), predicted as the gradient terms plus the main copy (4 B per
    parameter where ``optimizer_bytes`` counts one); ``optimizer`` = growth from the pre-step hook to the
    update's end (Adam's m and v), predicted as the optimizer terms without the main copy.
    """
    c = pred["constants"]
    master = max(0.0, c["optimizer_bytes"] - 8.0) / c["optimizer_bytes"] if backend == "megatron" else 0.0
    out: dict[str, Any] = {}
    for net in ("actor", "critic"):
        t = {term.name: term.bytes for term in pred[net].terms}
        opt_bytes = t["expert_optimizer"] + t["dense_optimizer"]
        pre = rec.get(f"{net}/pre_step", "alloc")
        if backend == "megatron":
            grads = placed.get(f"{net}_grads")
            optimizer = diff(rec.get(f"{net}/end", "alloc"), pre)
        else:
            grads = diff(pre, rec.get(f"{net}/start", "alloc"))
            optimizer = diff(rec.get(f"{net}/post_step", "alloc"), pre)
        out[net] = {
            "weights": _term(t["expert_weights"] + t["dense_weights"], placed.get(net)),
            "grads": _term(t["expert_grads"] + t["dense_grads"] + master * opt_bytes, grads),
            "optimizer": _term((1.0 - master) * opt_bytes, optimizer),
            "activations": _term(
                t["recurrent_activations"]
                + t["attention_activations"]
                + t["edge_activations"]
                + t["logit_buffer"],
                diff(rec.get(f"{net}/pre_step", "peak"), pre),
            ),
        }
    out["allocator_residue"] = _term(pred["actor"].term("allocator_residue").bytes, placed.get("residue"))
    out["total"] = _term(pred["needed_gib"] * GIB, placed.get("total"))
    return out
