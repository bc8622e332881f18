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


def test_reported_logprob_is_untruncated_and_temperature_scaled():
    g = torch.Generator().manual_seed(0)
    token, lp = sample_token(LOGITS, SamplingParams(top_k=1, temperature=0.5), g, vocab_limit=4)
    z = [2 * math.log(p) for p in PROBS]
    assert token == 0
    assert lp == pytest.approx(z[0] - math.log(sum(math.exp(v) for v in z)), abs=1e-6)


def test_ids_beyond_the_vocab_limit_are_never_drawn():
    logits = torch.cat([LOGITS, torch.tensor([30.0, 30.0])])
    assert max(counts(SamplingParams(), n=500, logits=logits, vocab_limit=4)) < 4


def test_greedy_takes_the_argmax_and_reports_temperature_one():
    g = torch.Generator().manual_seed(0)
    token, lp = sample_token(LOGITS, SamplingParams(temperature=0), g, vocab_limit=4)
    assert token == 0 and lp == pytest.approx(math.log(0.5), abs=1e-6)
