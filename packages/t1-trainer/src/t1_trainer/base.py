"""The trainer seam: what the step code calls on a backend, and the registry of backends by name.

`t1_trainer.step` drives any object that satisfies `TrainerBackend`; the run picks the class from
`TRAINER_BACKENDS` with the recipe's ``trainer.backend`` and builds it with its ``from_spec(recipe, ...)``
classmethod, after its ``preflight(recipe)`` classmethod found nothing this backend cannot run (the shape
`TrainerBackendClass` gives). Adding a backend is one module and one entry here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from t1_spec import Recipe, Registry

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn

    from t1_trainer.samples import TrainSample

__all__ = ["TRAINER_BACKENDS", "OldLogprobs", "TrainerBackend", "TrainerBackendClass"]

OldLogprobs = Literal["recomputed", "rollout"] | Sequence[Literal["recomputed", "rollout"]]
"""The PPO ratio's denominator (T1 Eq. 17, Appendix 12) for a whole batch, or one choice per sample."""

TRAINER_BACKENDS = Registry(
    "trainer.backend",
    {
        "torch": "t1_trainer.torch_backend:TorchBackend",
        "megatron": "t1_trainer.megatron.backend:MegatronBackend",
    },
    checks={"torch": "t1_trainer.checks:torch_preflight"},
)
"""``trainer.backend`` -> its class: ``torch`` (plain PyTorch, one device) and ``megatron`` (megatron-core
models with its router replay; its preflight refuses it in one line where the ``t1-trainer[megatron]`` extra
is absent)."""


@runtime_checkable
class TrainerBackend(Protocol):
    """What `t1_trainer.step.ppo_step`, `critic_warmup_step` and `t1_trainer.publish.publish_weights` call.

    Arrays are per sample, float32 ``[T]`` over the sample's token stream, 0 at masked positions unless said
    otherwise (T1 §4.5 defines the quantities). The registered backends answer ``update_critic`` and
    ``update_actor`` with the one update loop of `t1_trainer.update`, over the narrower hooks it names
    (`t1_trainer.update.UpdateBackend`: forward, backward, optimizer step, weight export).
    """

    policy_version: int
    """The version of the actor weights the backend holds as last published (T1 Appendix 12): 0 at start,
    set by `t1_trainer.publish.publish_weights` to the receivers' new version; `t1_trainer.step.ppo_step`
    measures every sample's staleness against it. Part of the resumable state (restore it with the
    weights)."""

    def routing_errors(self, samples: Sequence[TrainSample]) -> dict[int, str]:
        """Index -> reason for every sample whose routing record cannot be replayed (empty without replay)."""
        ...

    def values(self, samples: Sequence[TrainSample]) -> list[np.ndarray]:
        """Pre-update critic values ``V_{phi_{t-1}}(s_j)``, float32 ``[T]`` per sample (0 at position 0)."""
        ...

    def update_critic(
        self, samples: Sequence[TrainSample], returns: Sequence[np.ndarray], old_values: Sequence[np.ndarray]
    ) -> dict[str, float]:
        """Critic update on the returns, value clip around ``old_values``; returns ``critic/*`` metrics."""
        ...

    def update_actor(
        self,
        samples: Sequence[TrainSample],
        advantages: Sequence[np.ndarray],
        *,
        old_logprobs: OldLogprobs = "recomputed",
    ) -> dict[str, Any]:
        """Actor update (clipped surrogate, R3 replay); returns ``actor/*`` metrics and aborted samples.

        ``old_logprobs`` names the ratio's denominator (T1 Appendix 12): ``recomputed`` (the actor's own
        first-pass log-probs, right at staleness 0) or ``rollout`` (``sample.rollout_logprobs``, the
        behaviour policy's at staleness >= 1), for the batch or per sample (a batch with trajectories that
        partial-rollout continuation carried over, older or of mixed versions). `t1_trainer.step.ppo_step`
        passes it only when some sample needs the rollout's.
        """
        ...

    def export_weights(self) -> dict[str, torch.Tensor]:
        """Actor weights under the engine's state_dict names, for publication to the engines."""
        ...


class TrainerBackendClass(Protocol):
    """The class-level side of a registered backend: the run's two calls before any step."""

    def preflight(self, recipe: Recipe) -> list[str]:
        """One line per setting of ``recipe`` this backend cannot run here, each led by its field path."""
        ...

    def from_spec(
        self, recipe: Recipe, *, actor: nn.Module | None = None, gap_without_replay: bool = True
    ) -> TrainerBackend:
        """Builds the backend of ``recipe``; ``actor`` is a policy the trainer may own (the engine's copy)."""
        ...
