"""PPO with a full critic, GAE, warm-up, backends, weight publication (T1 §4.5).

Pure math in `t1_trainer.algorithms`; the advantage estimators and their registry in `t1_trainer.advantages`;
the backend seam (`TrainerBackend`) and its registry `TRAINER_BACKENDS` in `t1_trainer.base`; the torch
backend (actor with R3 replay, full-size critic) in `t1_trainer.torch_backend`; the step order and critic
warm-up in `t1_trainer.step`; publication to the engines in `t1_trainer.publish`; weights to safetensors in
`t1_trainer.weights`. Settings come from `t1_spec.PPOSpec` itself, the only home of their defaults. The policy
model is `t1_policy`'s, imported when a backend builds one; the trainer never imports the rollout package.
"""

from t1_trainer.advantages import ADVANTAGE_ESTIMATORS, GAEEstimator, GRPOEstimator, compute_advantages
from t1_trainer.algorithms import (
    explained_variance,
    explained_variances,
    gae,
    grpo_advantages,
    ppo_policy_loss,
    value_loss,
)
from t1_trainer.base import TRAINER_BACKENDS, TrainerBackend, TrainerBackendClass
from t1_trainer.errors import NonFiniteUpdateError, SampleError, TrainerConfigError
from t1_trainer.publish import WeightReceiver, publish_weights
from t1_trainer.step import StepMetrics, critic_warmup, critic_warmup_step, ppo_step
from t1_trainer.torch_backend import Critic, TorchBackend
from t1_trainer.weights import save_weights

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "TRAINER_BACKENDS",
    "Critic",
    "GAEEstimator",
    "GRPOEstimator",
    "NonFiniteUpdateError",
    "SampleError",
    "StepMetrics",
    "TorchBackend",
    "TrainerBackend",
    "TrainerBackendClass",
    "TrainerConfigError",
    "WeightReceiver",
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
    "value_loss",
]
