"""Trainer backend (T1 §4.5, §6, §7)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from t1_spec._base import Spec


class TrainerSpec(Spec):
    """Which trainer backend updates actor and critic, where, and how often it saves."""

    backend: Literal["torch", "megatron"] = "torch"
    """``torch``: plain PyTorch on CPU or one GPU (optionally FSDP); ``megatron``: Megatron-Core, the paper's
    backend (Megatron-Core v0.16.0rc0, T1 §6)."""

    device: str = "cpu"
    """torch device string for the ``torch`` backend (``"cpu"``, ``"cuda"``, ``"cuda:0"``); ``"cuda"`` for
    ``megatron``."""

    checkpoint_every: int = Field(default=10, ge=0)
    """Save weights every this many steps (weights only, no optimizer state: a crash restarts rather than
    resumes, T1 §7). 10 in the paper; 0 = never."""
