"""Where a policy runs: the one check that a torch device string names a device this machine has.

Imports torch only to look for a CUDA device, so the preflight of a CPU recipe does not load it.
"""

from __future__ import annotations


def device_problem(field: str, device: str) -> str | None:
    """Why ``device`` cannot be used here, as one preflight line naming ``field``; ``None`` when it can.

    Args:
        field: the recipe path that holds the device, e.g. ``"trainer.device"``.
        device: a torch device string (``"cpu"``, ``"cuda"``, ``"cuda:N"``), as the spec validates it.

    Returns:
        ``"<field> 'cuda:1': torch sees 1 CUDA device(s) here; use 'cpu' or a visible device"`` for a CUDA
        device torch cannot see, else ``None``.
    """
    if not device.startswith("cuda"):
        return None
    import torch  # only for a CUDA device: a CPU recipe's preflight stays without torch

    index = int(device.partition(":")[2] or 0)
    if torch.cuda.is_available() and index < torch.cuda.device_count():
        return None
    return (
        f"{field} {device!r}: torch sees {torch.cuda.device_count()} CUDA device(s) here; "
        "use 'cpu' or a visible device"
    )
