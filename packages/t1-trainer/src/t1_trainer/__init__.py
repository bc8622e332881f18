"""PPO with a full critic, GAE, warm-up, backends, weight publication (T1 §4.5).

Pure math in `t1_trainer.algorithms`; the advantage estimators and their registry in `t1_trainer.advantages`;
the backend seam (`TrainerBackend`) and its registry `TRAINER_BACKENDS` in `t1_trainer.base`; the torch
backend (actor with R3 replay, full-size critic) in `t1_trainer.torch_backend`; the one update loop both
backends run, over the hooks `UpdateBackend`, in `t1_trainer.update`; the step order and critic
warm-up in `t1_trainer.step`; publication to the engines in `t1_trainer.publish`; weights to safetensors in
`t1_trainer.weights`. Settings come from `t1_spec.PPOSpec` itself, the only home of their defaults. The policy
model is `t1_policy`'s, imported when a backend builds one; the trainer never imports the rollout package.
Importing the package imports no torch: the names of the torch-using modules load on first access.
"""

import importlib
from typing import TYPE_CHECKING, Any

from t1_trainer.base import TRAINER_BACKENDS, TrainerBackend, TrainerBackendClass
from t1_trainer.errors import NonFiniteUpdateError, SampleError, StalenessError, TrainerConfigError

if TYPE_CHECKING:
    from t1_trainer.advantages import ADVANTAGE_ESTIMATORS, GAEEstimator, GRPOEstimator, compute_advantages
    from t1_trainer.algorithms import (
        explained_variance,
        explained_variances,
        gae,
        grpo_advantages,
        ppo_policy_loss,
        value_loss,
    )
    from t1_trainer.publish import WeightReceiver, publish_weights
    from t1_trainer.step import StepMetrics, check_staleness, critic_warmup, critic_warmup_step, ppo_step
    from t1_trainer.torch_backend import Critic, TorchBackend
    from t1_trainer.update import UpdateBackend, update_actor, update_critic
    from t1_trainer.weights import save_weights

_LAZY = {
    **dict.fromkeys(
        ("ADVANTAGE_ESTIMATORS", "GAEEstimator", "GRPOEstimator", "compute_advantages"),
        "t1_trainer.advantages",
    ),
    **dict.fromkeys(
        (
            "explained_variance",
            "explained_variances",
            "gae",
            "grpo_advantages",
            "ppo_policy_loss",
            "value_loss",
        ),
        "t1_trainer.algorithms",
    ),
    **dict.fromkeys(("WeightReceiver", "publish_weights"), "t1_trainer.publish"),
    **dict.fromkeys(
        ("StepMetrics", "check_staleness", "critic_warmup", "critic_warmup_step", "ppo_step"),
        "t1_trainer.step",
    ),
    **dict.fromkeys(("Critic", "TorchBackend"), "t1_trainer.torch_backend"),
    **dict.fromkeys(("UpdateBackend", "update_actor", "update_critic"), "t1_trainer.update"),
    "save_weights": "t1_trainer.weights",
}
"""Public name -> the module that defines it, imported on first access: those modules import torch, so the
package itself (the seam, its registry, the errors) imports none."""


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 't1_trainer' has no attribute {name!r}")


__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "TRAINER_BACKENDS",
    "Critic",
    "GAEEstimator",
    "GRPOEstimator",
    "NonFiniteUpdateError",
    "SampleError",
    "StalenessError",
    "StepMetrics",
    "TorchBackend",
    "TrainerBackend",
    "TrainerBackendClass",
    "TrainerConfigError",
    "UpdateBackend",
    "WeightReceiver",
    "check_staleness",
    "compute_advantages",
    "critic_warmup",
    "critic_warmup_step",
    "explained_variance",
    "explained_variances",
    "gae",
    "grpo_advantages",
    "ppo_policy_loss",
    "ppo_step",
    "publish_weights",
    "save_weights",
    "update_actor",
    "update_critic",
    "value_loss",
]
