"""The policy model of a T1 run and the token log-probs that the engine and the trainer share (T1 §4.4).

The embedded engine samples from this model and the torch trainer differentiates it, so both build it with
`build_model` (same architecture, same seeded weights) and score tokens with `token_logprobs` (same quantity):
the rollout log-prob and the trainer's log-prob differ only by the numerics that T1 §4.4 measures, never by
definition.

The critic's trunk (`Critic`: the decoder with a scalar value head) and the device check (`device_problem`)
live here too, so every engine and trainer backend shares them. The scoring helpers need only torch; the
model parts (`build_model`, `hf_config_from_spec`, `silence_kernel_fallback_warnings`, from
`t1_policy.model`) import transformers on first use, so reading a vocabulary limit or scoring logits does
not load the model library.
"""

from typing import TYPE_CHECKING, Any

from t1_policy.critic import Critic
from t1_policy.device import device_problem
from t1_policy.logprobs import QWEN35_NUM_REAL_TOKENS, logprob_vector, num_real_tokens, token_logprobs

if TYPE_CHECKING:
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

_MODEL_PARTS = {"build_model", "hf_config_from_spec", "silence_kernel_fallback_warnings"}


def __getattr__(name: str) -> Any:
    if name in _MODEL_PARTS:
        from t1_policy import model

        return getattr(model, name)
    raise AttributeError(f"module 't1_policy' has no attribute {name!r}")
