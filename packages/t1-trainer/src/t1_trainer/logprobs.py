"""Log-probs of sampled tokens through the LM head, chunked, with an analytic backward (memory-bounded).

The value is the engine's own definition (`t1_policy.token_logprobs`: ``log_softmax(logits / tau)`` over the
real vocabulary, T1 §4.4 compares exactly this quantity); only the backward is written by hand. For
``logp_j = z_{j,t_j} - logsumexp(z_j)`` with ``z = (h W^T)[:, :V'] / tau``:

    d logp_j / d logits_{j,v} = (1[v = t_j] - softmax(z_j)_v) / tau   for v < V', 0 beyond,

so the backward recomputes one chunk's logits and needs no saved ``[n, V]`` tensor: with V = 248,320 a chunk
of `LOGIT_CHUNK` rows costs about 0.25 GB in fp32 whatever the sample length.
"""

from __future__ import annotations

from typing import Any

import torch

from t1_policy.logprobs import token_logprobs

__all__ = ["LOGIT_CHUNK", "lm_head_logprobs"]

LOGIT_CHUNK = 256
"""Rows whose logits exist at once: 256 x 248,320 x 4 B = 254 MB in fp32."""


class _HeadLogprob(torch.autograd.Function):
    """``[n, H] x [V, H] -> [n]`` sampled-token log-probs; the backward recomputes the logits."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        targets: torch.Tensor,
        temperature: float,
        vocab_limit: int,
    ) -> torch.Tensor:
        with torch.no_grad():
            logits = hidden @ weight.t()
            logp = token_logprobs(logits, targets, temperature, vocab_limit=vocab_limit)
        ctx.save_for_backward(hidden, weight, targets)
        ctx.scale = 1.0 if temperature == 0 else float(temperature)  # greedy is scored at tau = 1, as SGLang
        ctx.vocab_limit = vocab_limit
        return logp

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        hidden, weight, targets = ctx.saved_tensors
        w = weight[: ctx.vocab_limit]
        g = grad_out.float() / ctx.scale
        # a row the loss selected out (gradient 0) is selected out here too, never multiplied by 0: its
        # hidden state or logits may be inf or NaN, and 0 * nan would reach both gradients
        dropped = g == 0
        hidden = torch.where(dropped[:, None], torch.zeros_like(hidden), hidden)
        # softmax(z) * (-g), then + g at the sampled id: d loss / d logits over the real vocabulary
        probs = torch.softmax((hidden @ w.t()).float() / ctx.scale, dim=-1)
        probs.mul_(-g[:, None])
        probs[torch.arange(targets.shape[0], device=targets.device), targets.long()] += g
        probs = probs.to(weight.dtype)
        grad_hidden = probs @ w if ctx.needs_input_grad[0] else None
        grad_weight = None
        if ctx.needs_input_grad[1]:
            grad_weight = torch.zeros_like(weight)
            grad_weight[: ctx.vocab_limit] = probs.t() @ hidden
        return grad_hidden, grad_weight, None, None, None


def lm_head_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    temperature: float,
    vocab_limit: int | None = None,
    chunk: int | None = None,
) -> torch.Tensor:
    """Log-probs ``[n]`` float32 of ``targets`` given the hidden states that score them.

    Args:
        hidden: ``[n, H]`` final hidden states (row j scores ``targets[j]``).
        weight: ``[V, H]`` LM-head weight (no bias, as Qwen3.5).
        targets: ``[n]`` int token ids.
        temperature: the engine's sampling temperature (0 is scored at 1).
        vocab_limit: normalise over ids ``< vocab_limit`` (the real vocabulary); None = all V rows.
        chunk: rows per chunk; default `LOGIT_CHUNK`.

    Returns:
        ``[n]`` float32, differentiable w.r.t. ``hidden`` and ``weight``.

    Raises:
        ValueError: a target id outside ``[0, vocab_limit)`` (from `token_logprobs`).
    """
    limit = int(weight.shape[0]) if vocab_limit is None else int(vocab_limit)
    step = chunk or LOGIT_CHUNK
    parts = [
        _HeadLogprob.apply(hidden[a : a + step], weight, targets[a : a + step], float(temperature), limit)
        for a in range(0, hidden.shape[0], step)
    ]
    return torch.cat(parts) if parts else hidden.new_zeros(0, dtype=torch.float32)
