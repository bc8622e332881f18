"""Token log-probabilities as the sampler reports them: ``log_softmax(logits / temperature)`` over real ids.

The embedded engine reads the rollout log-prob from `logprob_vector`, and the trainer recomputes it with
`token_logprobs`: one definition on both sides, so T1 §4.4's train-inference gap measures numerics only.
"""

from __future__ import annotations

import torch

__all__ = ["QWEN35_NUM_REAL_TOKENS", "logprob_vector", "num_real_tokens", "token_logprobs"]

QWEN35_NUM_REAL_TOKENS = 248077
"""Ids ``>= 248077`` of the 248,320-row Qwen3.5 embedding are padding, not tokens (the tokenizer's last
special token is 248076). Sampling masks them and `token_logprobs` normalises over the real ids only."""


def num_real_tokens(vocab_size: int) -> int:
    """Number of sampleable ids: ``min(vocab_size, 248077)`` (Qwen3.5 pads its vocabulary to 248,320)."""
    return min(vocab_size, QWEN35_NUM_REAL_TOKENS)


def logprob_vector(
    logits: torch.Tensor, temperature: float = 1.0, *, vocab_limit: int | None = None
) -> torch.Tensor:
    """``log_softmax(logits / temperature)`` over the real ids: the distribution `token_logprobs` reads.

    Args:
        logits: float ``[..., vocab]``.
        temperature: >= 0; 0 (greedy) is scored at temperature 1, as SGLang does.
        vocab_limit: keep ids ``< vocab_limit`` only; None = all.

    Returns:
        float32 ``[..., vocab_limit]`` log-probabilities.

    Raises:
        ValueError: negative temperature.
    """
    if temperature < 0:
        raise ValueError(f"temperature={temperature} must be >= 0")
    if vocab_limit is not None:
        logits = logits[..., :vocab_limit]
    scale = 1.0 if temperature == 0 else temperature
    return torch.log_softmax(logits.float() / scale, dim=-1)


def token_logprobs(
    logits: torch.Tensor, ids: torch.Tensor, temperature: float = 1.0, *, vocab_limit: int | None = None
) -> torch.Tensor:
    """Log-probability of ``ids`` under ``log_softmax(logits / temperature)``: the rollout log-prob.

    This is the quantity the engine reports and the trainer recomputes (T1 §4.4 compares the two). As in
    SGLang, top-p / top-k truncation does NOT renormalise it: it is the log-prob under the temperature-scaled
    full distribution. ``temperature == 0`` (greedy) is scored at temperature 1, as SGLang does.

    Args:
        logits: float ``[..., vocab]``.
        ids: int64 ``[...]`` (same leading shape), the tokens to score.
        temperature: sampling temperature (>= 0).
        vocab_limit: normalise over ids ``< vocab_limit`` only (the real, sampleable ids; see
            `num_real_tokens`); None = the whole last dimension.

    Returns:
        float32 ``[...]`` log-probabilities (differentiable w.r.t. ``logits``).

    Raises:
        ValueError: negative temperature, or an id outside ``[0, vocab_limit)``.
    """
    logp = logprob_vector(logits, temperature, vocab_limit=vocab_limit)
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= logp.shape[-1]):
        raise ValueError(
            f"token ids must lie in [0, {logp.shape[-1]}); got [{int(ids.min())}, {int(ids.max())}]"
        )
    return logp.gather(-1, ids.long().unsqueeze(-1)).squeeze(-1)
