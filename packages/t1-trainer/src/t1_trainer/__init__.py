"""PPO with a full critic, GAE, warm-up, backends (T1 §4.5).

Pure math in `t1_trainer.algorithms`; settings in `t1_trainer.config`; the torch backend (actor with R3
replay, full-size critic) in `t1_trainer.torch_backend`; the step order and critic warm-up in
`t1_trainer.step`; weights to safetensors in `t1_trainer.weights`. Importing this package does not import
torch models; `TorchBackend` imports `t1_rollout` and `t1_r3` when built.
"""

from t1_trainer.algorithms import explained_variance, gae, grpo_advantages, ppo_policy_loss, value_loss
from t1_trainer.config import PpoHyperparams, check_ppo_settings
from t1_trainer.errors import NonFiniteUpdateError, SampleError, TrainerConfigError
from t1_trainer.step import StepMetrics, compute_advantages, critic_warmup, critic_warmup_step, ppo_step
from t1_trainer.torch_backend import Critic, TorchBackend, TrainerBackend
from t1_trainer.weights import save_weights

__all__ = [
    "Critic",
    "NonFiniteUpdateError",
    "PpoHyperparams",
    "SampleError",
    "StepMetrics",
    "TorchBackend",
    "TrainerBackend",
    "TrainerConfigError",
    "check_ppo_settings",
    "compute_advantages",
    "critic_warmup",
    "critic_warmup_step",
    "explained_variance",
    "gae",
    "grpo_advantages",
    "ppo_policy_loss",
    "ppo_step",
    "save_weights",
    "value_loss",
]
