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
    from t1_capacity.layouts import TORCH_LOGIT_CHUNK

    for name in ("actor", "critic"):
        by_kind = row[name]["activations_by_kind"]
        assert sum(by_kind.values()) == row[name]["activations"] > 0
        for kind in ("attention", "gdn", "moe", "shared_expert", "layer"):
            assert by_kind[kind] > 0, (name, kind)
    rows = min(row["loss_rows"], TORCH_LOGIT_CHUNK)
    assert row["actor"]["logits"] == pytest.approx(rows * 248_320 * 12, rel=0.02)  # chunk + 2 fp32 copies
    assert row["critic"]["logits"] == 0
    assert row["rss_peak"] > row["rss_base"] > 0


@pytest.fixture(scope="module")
def megatron_row() -> dict:
    pytest.importorskip(
        "megatron.core", reason="megatron-core (the t1-trainer[megatron] extra) is not installed"
    )
    cmd = [sys.executable, str(ROOT / "tools" / "bench" / "bench_memory.py"), "--child", "tiny", "512"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run(
        [*cmd, "--backend", "megatron", "--dtype", "bfloat16"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_megatron_on_the_cpu_is_bf16_adamw_and_one_logit_chunk(megatron_row: dict) -> None:
    """The megatron backend's CPU path: bf16 weights and grads, AdamW m and v in bf16, a 10 B/logit chunk."""
    from t1_capacity import load
    from t1_capacity.layouts import TORCH_LOGIT_CHUNK

    assert megatron_row["overrides"] == ["model.full_attention_interval=1"]
    model = load(ROOT / "recipes" / "tiny-cpu.yaml", megatron_row["overrides"]).model
    for name in ("actor", "critic"):
        got = megatron_row[name]
        assert got["weights"] == got["grads"], name
        assert got["optimizer"] == pytest.approx(2 * got["weights"], rel=1e-3), name  # + step counters
        by_kind = got["activations_by_kind"]
        assert by_kind["gdn"] == 0 and by_kind["attention"] > by_kind["moe"] > 0, name
    params = model.expert_params + model.dense_params
    assert megatron_row["actor"]["weights"] == pytest.approx(2 * params, rel=0.01)
    rows = min(megatron_row["loss_rows"], TORCH_LOGIT_CHUNK)
    assert megatron_row["actor"]["logits"] == pytest.approx(rows * 248_320 * 10, rel=0.02)  # bf16 + 2 fp32


def test_the_stored_megatron_cpu_fit_prices_a_wall_it_was_not_fitted_on(
    megatron_row: dict, tmp_path: Path
) -> None:
    """Fitted on walls 1,024 and 2,048; at 512 tokens the activations are within +-15%, and so is every term
    above 1% but the logit chunk, priced at min(wall, 256) rows where the sample had fewer loss rows."""
    from t1_capacity.calibrate_backend import case_constants, read_bench, table

    path = (
        ROOT
        / "packages"
        / "t1-capacity"
        / "src"
        / "t1_capacity"
        / "coefficients"
        / "megatron-cpu-bench.jsonl"
    )
    line = json.loads(path.read_text())
    line["rows"] = [megatron_row]
    tmp = tmp_path / "bench-megatron-512.jsonl"
    tmp.write_text(json.dumps(line) + "\n")
    (case,) = read_bench(tmp, ROOT / "recipes" / "tiny-cpu.yaml")
    rows = table([case], case_constants(case, stored=True))
    missed = [(r.network, r.term) for r in rows if r.network != "process" and not r.within]
    assert missed == [("actor", "logits")]  # the plan knows the wall, not the loss rows: an upper bound
    (logits,) = [r for r in rows if r.term == "logits" and r.network == "actor"]
    assert logits.predicted / logits.measured == pytest.approx(256 / megatron_row["loss_rows"], rel=0.01)
    act = {r.network: r.ratio for r in rows if r.term == "activations"}
    assert all(0.85 <= v <= 1.15 for v in act.values()), act
