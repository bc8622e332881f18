"""Publishing the actor's new weights to the engines that sample from it (T1 §7, Appendix 12).

Generation is quiesced on every receiver first, so no request spans two weight versions; then every
receiver takes the same weights under the next version, and all of them resume, even when an update fails.
The receivers are structural (`WeightReceiver`): the embedded engine, an SGLang client, or a test double.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from t1_trainer.base import TrainerBackend

if TYPE_CHECKING:
    import torch

__all__ = ["WeightReceiver", "publish_weights"]


@runtime_checkable
class WeightReceiver(Protocol):
    """What publication needs from an engine replica (the rollout package's `Engine` satisfies it)."""

    weight_version: int
    """The version of the weights the receiver serves now."""

    def pause(self) -> None:
        """Stops admitting generation and waits for the requests in flight (quiesce)."""
        ...

    def resume(self) -> None:
        """Admits generation again."""
        ...

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], *, weight_version: int) -> None:
        """Loads ``state_dict`` (the actor's state_dict names) and serves it as ``weight_version``."""
        ...


def publish_weights(backend: TrainerBackend, receivers: WeightReceiver | Sequence[WeightReceiver]) -> float:
    """Pauses every receiver, sends the actor's weights under version + 1, and resumes them all.

    The new version is one more than the larger of the receivers' shared ``weight_version`` and the backend's
    ``policy_version`` (a backend without the attribute counts as 0), so a version is never reused. The
    weights are exported once (`TrainerBackend.export_weights`) and given to each receiver in order; once
    every receiver took them, ``backend.policy_version`` is set to the same new version (T1 Appendix 12: the
    trainer's version, against which `t1_trainer.step.ppo_step` measures staleness). With no receivers
    nothing is exported or paused, and only ``backend.policy_version`` advances. Every receiver that was
    paused is resumed, whatever raised after its pause (another pause, the export, an update); the exception
    then propagates and ``backend.policy_version`` is left as it was.

    Args:
        backend: the trainer that holds the new actor weights; its ``policy_version`` is set here.
        receivers: one engine, or the replicas of one step's publication barrier (may be empty).

    Returns:
        Wall time of the publication, seconds (pause to resume).

    Raises:
        ValueError: the receivers do not hold one weight version (they were not published together), raised
            before any is paused.
    """
    targets = [receivers] if isinstance(receivers, WeightReceiver) else list(receivers)
    versions = sorted({r.weight_version for r in targets})
    if len(versions) > 1:
        raise ValueError(
            f"the {len(targets)} weight receivers hold versions {versions}; publication advances one shared "
            "version, so every receiver must hold the same one"
        )
    new_version = max([*versions, int(getattr(backend, "policy_version", 0))]) + 1
    t0 = time.monotonic()
    with ExitStack() as paused:
        for receiver in targets:
            receiver.pause()  # quiesce generation: no request spans two weight versions (T1 §7)
            paused.callback(receiver.resume)
        if targets:
            state_dict = backend.export_weights()
            for receiver in targets:
                receiver.update_weights(state_dict, weight_version=new_version)
        backend.policy_version = new_version
    return time.monotonic() - t0
