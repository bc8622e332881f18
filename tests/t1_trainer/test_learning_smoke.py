"""The learning benchmark's machinery (tools/bench/bench_learning.py) on a few steps: a bandit through PPO.

The benchmark shows the learning over 5 seeds and 40 steps; this checks the path runs end to end (real
`t1_tito.Sample` objects with recorded routing, `t1_trainer.step.ppo_step` on a `TorchBackend`) and that an
easy bandit at a large learning rate moves the policy toward the rewarded answers.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "recipes" / "tiny-cpu.yaml"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location(
        "bench_learning", ROOT / "tools" / "bench" / "bench_learning.py"
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_learning"] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


def test_bandit_samples_are_valid_streams_with_replayable_routing(bench):
    arm = bench.ARMS["ppo"]
    backend, _ = bench.build_backend(TINY, vocab=512, arm=arm, seed=0, batch=3)
    import torch

    samples = bench.sample_batch(backend, [11, 12, 13, 14], 3, torch.Generator().manual_seed(0))
    for s in samples:
        s.validate()
        assert s.routing.shape[0] == s.num_tokens - 1
        assert s.rollout_logprobs[-1] < 0 and s.loss_mask.tolist() == [0, 0, 0, 0, 1]
    assert backend.routing_errors(samples) == {}


def test_one_ppo_step_moves_log_prob_toward_the_rewarded_answers(bench):
    """One PPO step at actor LR 1e-2: rewarded answers gain log-prob against the unrewarded (a sign check).

    Half of the sampled answers are rewarded (an arbitrary split, so the direction can only come from the
    reward); after the step the mean log-prob of the rewarded ids, minus that of the others, must rise.
    """
    import torch

    from t1_policy import logprob_vector
    from t1_trainer.step import ppo_step

    backend, ppo = bench.build_backend(TINY, vocab=512, arm=bench.ARMS["ppo"], seed=1, batch=8)
    prompt = [21, 22, 23, 24]
    samples = bench.sample_batch(backend, prompt, 8, torch.Generator().manual_seed(1))
    answers = [int(s.token_ids[-1]) for s in samples]
    good = sorted(set(answers))[: len(set(answers)) // 2]
    bad = [a for a in set(answers) if a not in good]
    for s in samples:
        s.reward = float(int(s.token_ids[-1]) in good)

    def margin() -> float:
        with torch.no_grad():
            logits = backend.actor(input_ids=torch.tensor([prompt]), use_cache=False).logits[0, -1].float()
        lp = logprob_vector(logits, 1.0, vocab_limit=512)
        return float(lp[good].mean() - lp[bad].mean())

    before = margin()
    metrics = ppo_step(backend, samples, ppo)
    assert metrics["samples_aborted_routing"] == 0
    assert math.isfinite(metrics["actor/policy_loss"]) and math.isfinite(metrics["critic/value_loss"])
    assert margin() > before + 0.1


def test_trend_test_separates_a_rising_series_from_noise(bench):
    rng = np.random.default_rng(0)
    rising = list(np.linspace(0.1, 0.6, 40) + rng.normal(0, 0.05, 40))
    flat = list(0.125 + rng.normal(0, 0.05, 40))
    up, level = bench.trend(rising), bench.trend(flat)
    assert up["slope"] == pytest.approx(0.5 / 39, rel=0.2) and up["p"] < 1e-6
    assert level["p"] > 0.01


def test_trend_p_is_the_t_distributions_not_the_normal_approximations(bench):
    # 16 steps of the mini-pool PPO run (docs/learning.md): t = 3.395 on 14 df
    y = [0.092, 0.097, 0.086, 0.050, 0.089, 0.114, 0.056, 0.086, 0.117, 0.128, 0.119, 0.086, 0.133, 0.128]
    y += [0.142, 0.131]
    out = bench.trend(y)
    assert out["t"] == pytest.approx(3.395, abs=1e-3)
    assert out["p"] == pytest.approx(0.00436, abs=2e-5)  # the normal approximation gave 6.9e-4
