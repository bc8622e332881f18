"""SFT: the learning-rate schedule, and a fit that lowers cross-entropy on the loss tokens only."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from t1_spec import SftSpec, load_recipe
from t1_trainer.sft import sft_lr, train_sft

TINY = Path(__file__).resolve().parents[2] / "recipes" / "tiny-cpu.yaml"


def test_lr_warms_up_linearly_then_decays_by_cosine_to_the_floor():
    spec = SftSpec(lr=1e-3, warmup_fraction=0.1, min_lr_ratio=0.1)
    lrs = [sft_lr(i, 100, spec) for i in range(100)]
    assert lrs[0] == pytest.approx(1e-4) and lrs[9] == pytest.approx(1e-3)  # 10 warm-up steps
    assert lrs[10] == pytest.approx(1e-3) and lrs[-1] == pytest.approx(1e-4)
    mid = 10 + 89 / 2  # cosine half-way: the mean of peak and floor
    assert sft_lr(int(mid), 100, spec) == pytest.approx(5.5e-4, rel=0.02)
    with pytest.raises(ValueError, match="outside"):
        sft_lr(100, 100, spec)


class _S:
    def __init__(self, ids, mask):
        self.token_ids = np.asarray(ids, dtype=np.int32)
        self.loss_mask = np.asarray(mask, dtype=np.int8)
        self.rollout_logprobs = np.zeros(len(ids), dtype=np.float32)
        self.routing, self.reward = None, 0.0
        self.reward_index = int(np.flatnonzero(self.loss_mask)[-1])
        self.task_id, self.trial_id, self.chunk_index, self.policy_version = "t", "t#0", 0, 0


def test_fit_lowers_the_loss_on_assistant_tokens_and_ignores_the_context():
    from t1_policy import build_model

    spec = load_recipe(TINY).model.model_copy(update={"vocab_size": 256})  # no text: a small vocabulary
    model = build_model(spec, seed=0)
    context = [5, 6, 7, 8, 9, 10]
    sample = _S([*context, 40, 41, 42, 43], [0] * 6 + [1] * 4)
    # A second sample whose context tokens are random: were they targets, the loss could not fall as far.
    rng = np.random.default_rng(0)
    noisy = _S([*rng.integers(0, 256, 6), 40, 41, 42, 43], [0] * 6 + [1] * 4)
    rows = train_sft(model, [sample, noisy], SftSpec(epochs=8, lr=3e-3, warmup_fraction=0.0), seed=0)
    assert rows[0].tokens == 8
    assert math.log(256) - 1 < rows[0].loss < math.log(256) + 1  # chance level at the start
    assert rows[-1].loss < rows[0].loss - 2
    assert rows[-1].token_accuracy > rows[0].token_accuracy
