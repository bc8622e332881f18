"""Writing the trained networks to a run directory (safetensors)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from safetensors.torch import save_file, save_model

if TYPE_CHECKING:
    import torch

__all__ = ["process_umask", "save_weights"]


def save_weights(backend: object, run_dir: str | Path) -> dict[str, Path]:
    """Writes ``<run_dir>/weights/actor.safetensors`` and ``critic.safetensors``.

    The actor file holds ``backend.export_weights()``: the policy under the Hugging Face state_dict names the
    engine and `t1_trainer.checkpoint.load_actor` use, whatever the backend's own layout (the Megatron
    backend maps its names back), with tensors that share storage (tied embeddings) stored once under the
    first name in sorted order. The critic file holds the backend's critic module as it is (``body.*`` and
    ``value_head.weight`` for the torch backend; Megatron names for the Megatron backend).

    Args:
        backend: a `TrainerBackend` with a ``critic`` module.
        run_dir: the run directory; ``weights/`` is created.

    Returns:
        ``{"actor": path, "critic": path}``; the files get mode ``0666 & ~umask``, as ``open()`` would give.
    """
    out = Path(run_dir) / "weights"
    out.mkdir(parents=True, exist_ok=True)
    paths = {"actor": out / "actor.safetensors", "critic": out / "critic.safetensors"}
    save_file(_stored_once(backend.export_weights()), str(paths["actor"]), metadata={"format": "pt"})  # type: ignore[attr-defined]
    save_model(backend.critic, str(paths["critic"]))  # type: ignore[attr-defined]
    # safetensors writes 0600; give the files the mode any other file of the run gets (umask applies)
    umask = process_umask()
    for path in paths.values():
        path.chmod(0o666 & ~umask)
    return paths


def _stored_once(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``tensors`` less each one sharing storage with an earlier name (sorted order), made contiguous."""
    seen: set[tuple[int, tuple[int, ...]]] = set()
    out: dict[str, torch.Tensor] = {}
    for name in sorted(tensors):
        t = tensors[name]
        key = (t.untyped_storage().data_ptr() + t.storage_offset() * t.element_size(), tuple(t.shape))
        if key in seen:
            continue
        seen.add(key)
        out[name] = t.contiguous()
    return out


def process_umask() -> int:
    """The process umask, read without changing it (Linux >= 4.7 shows it in /proc); else set-and-restore."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return umask
