"""The process's random generators as JSON-ready data, for a checkpoint that resumes exactly.

A resumed run sets these states last, after building everything that draws from them at construction
(seeded model initialisation), so the steps after the checkpoint draw what the uninterrupted run drew.
"""

from __future__ import annotations

import base64
import random
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

__all__ = ["rng_state", "set_rng_state"]


def rng_state() -> dict[str, Any]:
    """The states of Python's ``random``, NumPy's global generator, torch's CPU and CUDA generators.

    The CUDA generators are read once CUDA is initialised (one state per device), never initialising it.

    Returns:
        ``{"python": [version, [625 ints], gauss], "numpy": ["MT19937", [624 ints], pos, has_gauss,
        cached_gaussian], "torch": base64 of the CPU state bytes, "cuda": [base64 per device]}``.
    """
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    cuda = []
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        cuda = [_b64(s) for s in torch.cuda.get_rng_state_all()]
    return {
        "python": [version, list(internal), gauss],
        "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        "torch": _b64(torch.get_rng_state()),
        "cuda": cuda,
    }


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Set every generator `rng_state` captured (the CUDA ones only where CUDA is available).

    Raises:
        KeyError, ValueError, TypeError, RuntimeError: ``state`` is not what `rng_state` returns.
    """
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(_unb64(state["torch"]))
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([_unb64(s) for s in state["cuda"]])


def _b64(t: torch.Tensor) -> str:
    return base64.b64encode(t.numpy().tobytes()).decode()


def _unb64(s: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(s)), dtype=torch.uint8)
