"""Reading a run's actor weights back into the policy model (the inverse of `t1_trainer.weights`)."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported by load_actor only: the preflight reads headers without it
    import torch

__all__ = ["CheckpointMismatchError", "actor_weights_path", "load_actor", "read_tensor_shapes"]


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


def read_tensor_shapes(file: str | Path) -> dict[str, tuple[int, ...]]:
    """The tensor names and shapes of a safetensors file, read from its header alone (no tensor, no torch).

    The format: an 8-byte little-endian header length N, then N bytes of JSON mapping each tensor name to its
    ``dtype``, ``shape`` and ``data_offsets`` (an optional ``__metadata__`` entry is skipped).

    Args:
        file: a ``.safetensors`` file.

    Returns:
        ``{name: shape}`` with shapes as tuples of ints.

    Raises:
        CheckpointMismatchError: the file is not a readable safetensors file (too short, a header length
            past the end, a header that is not JSON, an entry without a shape or with data past the end),
            naming the file and what is wrong.
        OSError: the file cannot be opened.
    """
    path = Path(file)
    size = path.stat().st_size

    def bad(why: str) -> CheckpointMismatchError:
        return CheckpointMismatchError(f"checkpoint {path}: not a readable safetensors file ({why})")

    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise bad(f"{size} bytes, shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            raise bad(f"header length {n} runs past the end of the {size}-byte file")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise bad(f"the header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise bad("the header is not a JSON object")
    data = size - 8 - n
    shapes: dict[str, tuple[int, ...]] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        shape = entry.get("shape") if isinstance(entry, dict) else None
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
            raise bad(f"tensor {name!r} has no shape")
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(isinstance(o, int) for o in offsets)
            and 0 <= offsets[0] <= offsets[1] <= data
        ):
            raise bad(f"tensor {name!r} has data offsets {offsets!r} outside the {data} data bytes")
        shapes[name] = tuple(shape)
    return shapes


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
    from safetensors.torch import load_model

    file = actor_weights_path(path)
    shapes = read_tensor_shapes(file)
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
