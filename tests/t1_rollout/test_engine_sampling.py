import math
from collections import Counter

import pytest
import torch

from t1_rollout.engine import SamplingParams
from t1_rollout.engine.sampling import draw, sample_token

PROBS = [0.5, 0.3, 0.15, 0.05]
LOGITS = torch.tensor([math.log(p) for p in PROBS])


def counts(params, n=4000, logits=LOGITS, vocab_limit=4):
    g = torch.Generator().manual_seed(0)
    return Counter(sample_token(logits, params, g, vocab_limit=vocab_limit)[0] for _ in range(n))


def test_draw_follows_weights_and_skips_zero_weights():
    g = torch.Generator().manual_seed(1)
    c = Counter(draw(torch.tensor([1.0, 0.0, 6.0, 3.0]), g) for _ in range(20000))
    assert 1 not in c
    for i, p in ((0, 0.1), (2, 0.6), (3, 0.3)):
        assert abs(c[i] / 20000 - p) < 0.015


def test_top_k_keeps_only_the_k_most_likely():
    assert set(counts(SamplingParams(top_k=2))) == {0, 1}


def test_top_p_keeps_smallest_prefix_reaching_the_mass():
    # cumulative 0.5, 0.8, ...: top_p = 0.7 keeps ids {0, 1}; frequencies renormalised 0.625 / 0.375.
    c = counts(SamplingParams(top_p=0.7))
    assert set(c) == {0, 1} and abs(c[0] / 4000 - 0.625) < 0.03


def truncated_logprob(token, temperature, keep):
    """log of the renormalised probability of ``token`` over ``keep``, from PROBS by hand (no torch)."""
    z = [math.log(p) / temperature for p in PROBS]
    return z[token] - math.log(sum(math.exp(z[i]) for i in keep))


@pytest.mark.parametrize(
    ("params", "keep"),
    [
        # temperature 0.5 squares the odds: 0.25 : 0.09 : 0.0225 : 0.0025 (mass 0.365).
        (SamplingParams(top_k=2, temperature=0.5), (0, 1)),
        # top-p 0.9 at T = 0.5: shares 0.685, 0.247, 0.062, ...: 0.685 < 0.9 so id 1 stays, then 0.932.
        (SamplingParams(top_p=0.9, temperature=0.5), (0, 1)),
        # T = 1, top-p 0.85: cumulative 0.5, 0.8, 0.95: ids 0, 1, 2 stay (0.8 < 0.85).
        (SamplingParams(top_p=0.85), (0, 1, 2)),
        # min-p 0.2: keep p >= 0.1 -> ids 0, 1, 2.
        (SamplingParams(min_p=0.2), (0, 1, 2)),
        # top-k 3 then top-p 0.6 over the renormalised 0.526 / 0.316 / 0.158: ids 0, 1.
        (SamplingParams(top_k=3, top_p=0.6), (0, 1)),
    ],
)
def test_reported_logprob_is_the_truncated_renormalised_probability(params, keep):
    g = torch.Generator().manual_seed(0)
    seen = set()
    for _ in range(200):
        token, lp = sample_token(LOGITS, params, g, vocab_limit=4)
        seen.add(token)
        assert token in keep
        assert lp == pytest.approx(truncated_logprob(token, params.temperature, keep), abs=1e-5)
    assert seen == set(keep)


def test_top_k_one_reports_log_one_not_the_softmax():
    g = torch.Generator().manual_seed(0)
    token, lp = sample_token(LOGITS, SamplingParams(top_k=1, temperature=0.5), g, vocab_limit=4)
    assert token == 0 and lp == pytest.approx(0.0, abs=1e-6)


def test_untruncated_logprob_is_the_temperature_scaled_softmax_the_trainer_reads():
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        token, lp = sample_token(LOGITS, SamplingParams(temperature=0.7), g, vocab_limit=4)
        assert lp == pytest.approx(truncated_logprob(token, 0.7, range(4)), abs=1e-6)


def test_ids_beyond_the_vocab_limit_are_never_drawn():
    logits = torch.cat([LOGITS, torch.tensor([30.0, 30.0])])
    assert max(counts(SamplingParams(), n=500, logits=logits, vocab_limit=4)) < 4


def test_greedy_takes_the_argmax_with_log_prob_zero():
    g = torch.Generator().manual_seed(0)
    token, lp = sample_token(LOGITS, SamplingParams(temperature=0), g, vocab_limit=4)
    assert token == 0 and lp == 0.0


def test_a_reused_cdf_buffer_draws_the_same_ids_and_logprobs():
    # The engine keeps one float64 buffer for every draw's CDF: the same seeds must give the same ids and
    # log-probs, bit for bit, as a fresh buffer per draw (what the engine did before), over many draws.
    vocab, limit = 4096, 4000
    scratch = torch.empty(limit, dtype=torch.float64)
    fresh_gen, reused_gen = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    params = SamplingParams(temperature=1.0)
    for step in range(50):
        logits = torch.randn(vocab, generator=torch.Generator().manual_seed(step)) * 4
        fresh = sample_token(logits, params, fresh_gen, vocab_limit=limit)
        reused = sample_token(logits, params, reused_gen, vocab_limit=limit, scratch=scratch)
        assert fresh == reused
    weights = torch.rand(limit, generator=torch.Generator().manual_seed(1))
    assert draw(weights, torch.Generator().manual_seed(3)) == draw(
        weights, torch.Generator().manual_seed(3), scratch=scratch
    )
    wrong = torch.empty(limit, dtype=torch.float32)  # a buffer of the wrong dtype is not used
    assert draw(weights, torch.Generator().manual_seed(3), scratch=wrong) == draw(
        weights, torch.Generator().manual_seed(3)
    )
