"""The policy model of a T1 run and the token log-probs that the engine and the trainer share (T1 §4.4).

The embedded engine samples from this model and the torch trainer differentiates it, so both build it with
`build_model` (same architecture, same seeded weights) and score tokens with `token_logprobs` (same quantity):
the rollout log-prob and the trainer's log-prob differ only by the numerics that T1 §4.4 measures, never by
definition.

The critic's trunk (`Critic`: the decoder with a scalar value head) and the device check (`device_problem`)
live here too, so every engine and trainer backend shares them. Importing the package imports no torch:
each name loads its module on first use, the scoring helpers (`t1_policy.logprobs`) and the critic
(`t1_policy.critic`) torch, the model parts (`build_model`, `hf_config_from_spec`,
`silence_kernel_fallback_warnings`, from `t1_policy.model`) transformers too; `device_problem` imports torch
only for a CUDA device, so a CPU recipe's preflight loads neither.
"""

import importlib
from typing import TYPE_CHECKING, Any

from t1_policy.device import device_problem

if TYPE_CHECKING:
    from t1_policy.critic import Critic
    from t1_policy.logprobs import QWEN35_NUM_REAL_TOKENS, logprob_vector, num_real_tokens, token_logprobs
    from t1_policy.model import build_model, hf_config_from_spec, silence_kernel_fallback_warnings

__all__ = [
    "QWEN35_NUM_REAL_TOKENS",
    "Critic",
    "device_problem",
    "build_model",
    "hf_config_from_spec",
    "logprob_vector",
    "num_real_tokens",
    "silence_kernel_fallback_warnings",
    "token_logprobs",
]

_LAZY = {
    "Critic": "t1_policy.critic",
    "QWEN35_NUM_REAL_TOKENS": "t1_policy.logprobs",
    "logprob_vector": "t1_policy.logprobs",
    "num_real_tokens": "t1_policy.logprobs",
    "token_logprobs": "t1_policy.logprobs",
    "build_model": "t1_policy.model",
    "hf_config_from_spec": "t1_policy.model",
    "silence_kernel_fallback_warnings": "t1_policy.model",
}
"""Public name -> the module that defines it, imported on first access (torch; transformers for the model)."""


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 't1_policy' has no attribute {name!r}")
