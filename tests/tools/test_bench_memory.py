"""The memory benchmark (tools/bench/bench_memory.py) on one short case: what it measures is what the torch
backend allocates (tensor sizes), and its activation and logit figures are what the capacity model prices."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GIB = float(1 << 30)


@pytest.fixture(scope="module")
def row() -> dict:
    cmd = [sys.executable, str(ROOT / "tools" / "bench" / "bench_memory.py"), "--child", "tiny", "512"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_parameter_terms_are_the_built_networks(row: dict) -> None:
    from t1_policy import Critic, build_model
    from t1_spec import load_recipe

    spec = load_recipe(ROOT / "recipes" / "tiny-cpu.yaml").model
    actor = build_model(spec, seed=0)
    critic = Critic(actor.model, actor.config.hidden_size, seed=1)
    for name, net in (("actor", actor), ("critic", critic)):
        n = 4 * sum(p.numel() for p in net.parameters())
        got = row[name]
        assert got["weights"] == got["grads"] == n, name  # float32 weights and their gradients
        assert got["optimizer"] == pytest.approx(2 * n, rel=1e-3), name  # AdamW m and v (+ step counters)


def test_activations_are_split_by_kind_and_the_logit_chunk_is_priced(row: dict) -> None:
    from t1_capacity.footprint import TORCH_LOGIT_CHUNK

    for name in ("actor", "critic"):
        by_kind = row[name]["activations_by_kind"]
        assert sum(by_kind.values()) == row[name]["activations"] > 0
        for kind in ("attention", "gdn", "moe", "shared_expert", "layer"):
            assert by_kind[kind] > 0, (name, kind)
    rows = min(row["loss_rows"], TORCH_LOGIT_CHUNK)
    assert row["actor"]["logits"] == pytest.approx(rows * 248_320 * 12, rel=0.02)  # chunk + 2 fp32 copies
    assert row["critic"]["logits"] == 0
    assert row["rss_peak"] > row["rss_base"] > 0
