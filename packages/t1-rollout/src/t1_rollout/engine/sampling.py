"""Choosing the next token from one position's logits: temperature, top-k, top-p, seeded."""

from __future__ import annotations

import torch

from t1_rollout.engine.base import SamplingParams
from t1_rollout.model import token_logprobs

__all__ = ["sample_token"]


def sample_token(
    logits_v: torch.Tensor, params: SamplingParams, generator: torch.Generator, *, vocab_limit: int
) -> tuple[int, float]:
    """Samples one id from ``logits_v`` and returns it with its rollout log-prob.

    Ids ``>= vocab_limit`` (Qwen3.5's padded embedding rows) are never sampled. Top-k then top-p truncate the
    temperature-scaled distribution and the draw is renormalised over what is left; the REPORTED log-prob is
    `token_logprobs` (temperature-scaled, untruncated, over the real ids), as SGLang reports it and as the
    trainer recomputes it.

    Args:
        logits_v: float ``[vocab]`` logits of the last position.
        params: decoding parameters.
        generator: the request's seeded CPU generator.
        vocab_limit: number of real ids.

    Returns:
        ``(token_id, logprob)``.
    """
    logits_v = logits_v[:vocab_limit].float()
    if params.temperature == 0:
        token = int(torch.argmax(logits_v))
    else:
        scaled = logits_v / params.temperature
        if params.top_k > 0 and params.top_k < scaled.shape[0]:
            kth = torch.topk(scaled, params.top_k).values[-1]
            scaled = scaled.masked_fill(scaled < kth, float("-inf"))
        probs = torch.softmax(scaled, dim=-1)
        if params.top_p < 1.0:
            sorted_p, order = torch.sort(probs, descending=True)
            # Keep the smallest prefix whose mass reaches top_p (the first id is always kept).
            drop_sorted = torch.cumsum(sorted_p, dim=-1) - sorted_p >= params.top_p
            probs = probs.scatter(0, order, sorted_p.masked_fill(drop_sorted, 0.0))
        token = int(torch.multinomial(probs.cpu(), 1, generator=generator))
    logprob = float(token_logprobs(logits_v, torch.tensor(token), params.temperature))
    return token, logprob
