"""The byte layout of each trainer backend, and which stored calibration prices its activations (T1 §7.1).

Eq. 21 is the model of the paper's Megatron stack (bf16 weights, fp32 main gradients, fp32 master weights and
Adam moments sharded by the distributed optimizer, a logit buffer over the whole wall). The backends T1 builds
allocate otherwise, and `backend_constants` gives each its own bytes per parameter and per logit, plus the
activation coefficients measured for it on the machine kind it trains on
(``coefficients/<backend>-<machine>.json``, `t1_capacity.activations.stored`).
"""

from __future__ import annotations

from t1_capacity.activations import stored
from t1_capacity.footprint import CapacityConstants

TORCH_LOGIT_CHUNK = 256
"""Loss positions per LM-head chunk of the T1 trainers (``t1_trainer.logprobs.LOGIT_CHUNK``)."""

DTYPE_BYTES = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}

MACHINES = ("cpu", "cuda")
"""Machine kinds a calibration is stored for: ``trainer.device`` ``cpu``, or any ``cuda[:i]``."""


def machine_of(device: str) -> str:
    """``"cpu"`` or ``"cuda"`` for a ``trainer.device``; ValueError naming any other."""
    if device == "cpu":
        return "cpu"
    if device == "cuda" or device.startswith("cuda:"):
        return "cuda"
    raise ValueError(f"trainer.device {device!r}: the capacity model knows 'cpu' and 'cuda[:i]'")


def backend_constants(
    backend: str,
    dtype: str,
    *,
    device: str,
    alpha: float,
    b0_gib: float,
    calibrated_activations: bool = False,
    calibrated_b0: bool = False,
) -> CapacityConstants:
    """The byte layout of the trainer backend that trains in ``dtype`` on ``device``, with alpha and b0.

    ``megatron`` on CUDA: Eq. 21 as the paper's Megatron stack prices it (`PAPER_CONSTANTS`' bytes: bf16
    weights, fp32 main gradients, fp32 master + Adam m, v, 6 B per logit over the whole wall; T1 §7.1), with
    alpha and b0 as given (no stored calibration is applied: the paper's plans are priced as the paper does).
    ``torch`` (`t1_trainer.torch_backend`), and ``megatron`` on the CPU (`t1_trainer.megatron.backend`: there
    megatron's grad buffers and distributed optimizer cannot be built, so it steps torch's AdamW on the
    megatron modules): weights, gradients and AdamW's two moments in the weight dtype, no master copy
    (``w, w, 2w`` bytes per parameter); log-probs through a chunked LM head of at most `TORCH_LOGIT_CHUNK`
    loss positions whose backward recomputes the chunk, so only one chunk's logits live: the chunk in the
    weight dtype plus two fp32 ``[rows, V]`` tensors, ``w + 8`` bytes per logit.

    Args:
        backend: ``trainer.backend``: ``"torch"`` or ``"megatron"``.
        dtype: ``model.dtype``: ``"float32"``, ``"bfloat16"`` or ``"float16"``.
        device: ``trainer.device``: ``"cpu"`` or ``"cuda[:i]"``; picks the stored calibration
            (``coefficients/<backend>-<cpu|cuda>.json``).
        alpha: activation bytes per token per layer (``plan.alpha``).
        b0_gib: allocator residue, GiB (``plan.b0_gib``).
        calibrated_activations: price activations with the coefficients measured for the backend on this
            machine kind, scaled by the dtype's width against the measured one, instead of alpha; where none
            are stored, alpha is used. Megatron on CUDA keeps Eq. 21.
        calibrated_b0: likewise b0: the stored one instead of ``b0_gib``.

    Raises:
        ValueError: an unknown backend, dtype or device, naming it; a stored coefficients file that does not
            parse.
    """
    machine = machine_of(device)
    if backend not in ("torch", "megatron"):
        raise ValueError(f"trainer.backend {backend!r}: the capacity model knows 'torch' and 'megatron'")
    if backend == "megatron" and machine == "cuda":
        return CapacityConstants(alpha=alpha, b0_gib=b0_gib)
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"model.dtype {dtype!r}: the capacity model knows {', '.join(DTYPE_BYTES)}")
    w = DTYPE_BYTES[dtype]
    got = stored(backend, machine) if calibrated_activations or calibrated_b0 else None
    scale = w / DTYPE_BYTES.get(got.dtype, w) if got else 1.0
    return CapacityConstants(
        alpha=alpha,
        b0_gib=got.b0_gib if got and calibrated_b0 else b0_gib,
        activations=got.activations.scaled(scale) if got and calibrated_activations else None,
        weight_bytes=w,
        grad_bytes=w,
        optimizer_bytes=2 * w,
        logit_bytes=w + 8.0,
        logit_rows=TORCH_LOGIT_CHUNK,
    )
