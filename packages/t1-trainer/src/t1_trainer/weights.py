"""Writing the trained networks to a run directory (safetensors)."""

from __future__ import annotations

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
        ``{"actor": path, "critic": path}``.
    """
    out = Path(run_dir) / "weights"
    out.mkdir(parents=True, exist_ok=True)
    paths = {"actor": out / "actor.safetensors", "critic": out / "critic.safetensors"}
    save_model(backend.actor, str(paths["actor"]))  # type: ignore[attr-defined]
    save_model(backend.critic, str(paths["critic"]))  # type: ignore[attr-defined]
    return paths
