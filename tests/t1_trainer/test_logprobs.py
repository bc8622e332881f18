"""The hand-written LM-head backward equals autograd through the engine's own log-prob definition."""

import pytest
import torch

from t1_policy import token_logprobs
from t1_trainer.logprobs import lm_head_logprobs


@pytest.mark.parametrize("temperature,limit", [(1.0, None), (0.7, 90), (0.0, 100)])
def test_analytic_backward_matches_autograd(temperature, limit):
    g = torch.Generator().manual_seed(0)
    n, h, v = 11, 8, 100
    hidden = torch.randn(n, h, generator=g)
    weight = torch.randn(v, h, generator=g)
    targets = torch.randint(0, limit or v, (n,), generator=g)
    upstream = torch.randn(n, generator=g)

    h1, w1 = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    ref = token_logprobs(h1 @ w1.t(), targets, temperature, vocab_limit=limit)
    (ref * upstream).sum().backward()

    h2, w2 = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    got = lm_head_logprobs(h2, w2, targets, temperature=temperature, vocab_limit=limit, chunk=4)
    (got * upstream).sum().backward()

    torch.testing.assert_close(got, ref)  # same value: the engine's definition, bit for bit
    # gradients agree to float32 rounding (the engine's log-prob is computed in float32)
    torch.testing.assert_close(h2.grad, h1.grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(w2.grad, w1.grad, rtol=1e-4, atol=1e-6)
    if limit is not None:
        assert not w2.grad[limit:].any()  # padding rows of the vocabulary get no gradient


@pytest.mark.parametrize("junk", [float("nan"), float("inf")])
def test_a_row_the_loss_selects_out_adds_nothing_to_the_head_gradient_even_if_not_finite(junk):
    # Row 1 scores a position the loss masks out (selected away); its hidden state is not finite.
    g = torch.Generator().manual_seed(1)
    hidden, weight = torch.randn(3, 8, generator=g), torch.randn(50, 8, generator=g)
    targets = torch.tensor([4, 7, 9])
    keep = torch.tensor([True, False, True])
    grads = []
    for fill in (0.0, junk):
        h = hidden.clone()
        h[1] = fill
        w = weight.clone().requires_grad_(True)
        logp = lm_head_logprobs(h, w, targets, temperature=1.0, chunk=2)
        torch.where(keep, logp, torch.zeros_like(logp)).sum().backward()
        grads.append(w.grad)
    assert torch.isfinite(grads[1]).all()
    torch.testing.assert_close(grads[1], grads[0])
