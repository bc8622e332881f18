"""Writing the trained networks to a run directory (safetensors)."""

from __future__ import annotations

import os
from pathlib import Path

from safetensors.torch import save_model

__all__ = ["save_weights"]


def save_weights(backend: object, run_dir: str | Path) -> dict[str, Path]:
    """Writes ``<run_dir>/weights/actor.safetensors`` and ``critic.safetensors``.

    The actor file holds the policy under the engine's state_dict names (tied tensors stored once, as
    `safetensors.torch.save_model` does); the critic file holds ``body.*`` (the decoder) and
    ``value_head.weight``.

    Args:
        backend: a `TorchBackend` (anything with ``actor`` and ``critic`` modules).
        run_dir: the run directory; ``weights/`` is created.

    Returns:
        ``{"actor": path, "critic": path}``; the files get mode ``0666 & ~umask``, as ``open()`` would give.
    """
    out = Path(run_dir) / "weights"
    out.mkdir(parents=True, exist_ok=True)
    paths = {"actor": out / "actor.safetensors", "critic": out / "critic.safetensors"}
    save_model(backend.actor, str(paths["actor"]))  # type: ignore[attr-defined]
    save_model(backend.critic, str(paths["critic"]))  # type: ignore[attr-defined]
    # safetensors writes 0600; give the files the mode any other file of the run gets (umask applies)
    umask = _umask()
    for path in paths.values():
        path.chmod(0o666 & ~umask)
    return paths


def _umask() -> int:
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
