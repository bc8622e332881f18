"""Reading a run's actor weights back into the policy model (the inverse of `t1_trainer.weights`)."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_model

__all__ = ["CheckpointMismatchError", "actor_weights_path", "load_actor"]


class CheckpointMismatchError(ValueError):
    """A weights file does not fit the model built from the recipe: names or shapes differ."""


def actor_weights_path(path: str | Path) -> Path:
    """The actor file of a run directory (``<run>/weights/actor.safetensors``), or ``path`` itself.

    Args:
        path: a run directory, a checkpoint directory (``checkpoints/step-NNNN``), its ``weights/`` folder,
            or a ``.safetensors`` file.

    Raises:
        FileNotFoundError: no actor file there, naming the paths looked at.
    """
    p = Path(path)
    if p.is_file():
        return p
    candidates = [p / "weights" / "actor.safetensors", p / "actor.safetensors"]
    for c in candidates:
        if c.is_file():
            return c
    raise FileNotFoundError(
        f"checkpoint {path}: no actor weights (looked for {', '.join(str(c) for c in candidates)}); give a "
        "run directory that finished (t1 train writes weights/actor.safetensors) or a .safetensors file"
    )


def load_actor(model: torch.nn.Module, path: str | Path) -> Path:
    """Load the actor weights a run saved into ``model`` in place (`t1_trainer.weights.save_weights`).

    Every tensor name of the file must be a parameter or buffer of ``model`` with the same shape, and every
    tensor of ``model`` must be in the file (tied tensors, stored once by ``save_model``, count as present).
    Values are copied into the model's own dtype and device.

    Args:
        model: the policy built from the recipe's ``model`` section (`t1_policy.build_model`).
        path: a run directory or a ``.safetensors`` file (see `actor_weights_path`).

    Returns:
        The file that was loaded.

    Raises:
        FileNotFoundError: no actor file at ``path``.
        CheckpointMismatchError: the file is not safetensors, or its names or shapes differ from the model's
            (the first few of each listed), so it was saved from another ``model`` section.
    """
    file = actor_weights_path(path)
    try:
        with safe_open(str(file), framework="pt") as f:
            shapes = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}  # noqa: SIM118
    except (SafetensorError, OSError) as exc:
        raise CheckpointMismatchError(f"checkpoint {file}: not a readable safetensors file ({exc})") from None
    own = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    unknown = sorted(set(shapes) - set(own))
    wrong = sorted(n for n in set(shapes) & set(own) if shapes[n] != own[n])
    problems = []
    if unknown:
        problems.append(f"{len(unknown)} tensors the model does not have ({_few(unknown)})")
    if wrong:
        problems.append(
            f"{len(wrong)} tensors of another shape ("
            + ", ".join(f"{n}: file {list(shapes[n])}, model {list(own[n])}" for n in wrong[:3])
            + (", ..." if len(wrong) > 3 else "")
            + ")"
        )
    if not problems:
        missing, _ = load_model(model, str(file), strict=False)
        if missing:
            problems.append(f"{len(missing)} model tensors missing from the file ({_few(sorted(missing))})")
    if problems:
        raise CheckpointMismatchError(
            f"checkpoint {file} does not fit the model of the recipe's model section: "
            + "; ".join(problems)
            + ". Evaluate it with the recipe the run was trained with (its recipe.yaml)"
        )
    return file


def _few(names: list[str]) -> str:
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
