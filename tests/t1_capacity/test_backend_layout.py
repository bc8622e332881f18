"""The byte layout per trainer backend: the gate prices what each backend allocates (T1 §7.1, Eq. 21)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from t1_capacity import ACTOR, CRITIC, footprint, load
from t1_capacity.check import check_plan
from t1_capacity.footprint import PAPER_CONSTANTS, CapacityConstants, logit_buffer_bytes, stages
from t1_capacity.layouts import TORCH_LOGIT_CHUNK, backend_constants
from t1_capacity.plan import Plan

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "recipes" / "tiny-cpu.yaml"
PROD = ROOT / "recipes" / "t1-122b.yaml"
GIB = float(1 << 30)
V = 248_320


def test_torch_layout_is_the_weight_dtype_and_one_logit_chunk() -> None:
    c = backend_constants("torch", "float32", device="cpu", alpha=1.0, b0_gib=0.5)
    assert (c.weight_bytes, c.grad_bytes, c.optimizer_bytes) == (4.0, 4.0, 8.0)  # AdamW m, v; no master
    assert (c.logit_bytes, c.logit_rows) == (12.0, 256)  # the chunk + two fp32 copies
    assert (c.alpha, c.b0_gib) == (1.0, 0.5)
    b = backend_constants("torch", "bfloat16", device="cuda", alpha=1.0, b0_gib=0.5)
    assert (b.weight_bytes, b.grad_bytes, b.optimizer_bytes, b.logit_bytes) == (2.0, 2.0, 4.0, 10.0)


def test_megatron_layout_is_eq21_of_the_paper_stack() -> None:
    a, b0 = PAPER_CONSTANTS.alpha, PAPER_CONSTANTS.b0_gib
    c = backend_constants("megatron", "bfloat16", device="cuda:0", alpha=a, b0_gib=b0)
    assert c == PAPER_CONSTANTS and c.logit_rows is None


def test_megatron_on_the_cpu_is_torch_adamw_in_the_weight_dtype_and_one_logit_chunk() -> None:
    """The CPU path of the megatron backend steps torch's AdamW (no grad buffers, no main copy)."""
    c = backend_constants("megatron", "bfloat16", device="cpu", alpha=1.0, b0_gib=0.5)
    assert (c.weight_bytes, c.grad_bytes, c.optimizer_bytes) == (2.0, 2.0, 4.0)
    assert (c.logit_bytes, c.logit_rows) == (10.0, TORCH_LOGIT_CHUNK)


@pytest.mark.parametrize(
    ("backend", "dtype", "device", "word"),
    [("jax", "float32", "cpu", "jax"), ("torch", "int8", "cpu", "int8"), ("torch", "float32", "tpu", "tpu")],
)
def test_unknown_backend_dtype_or_device_is_named(backend: str, dtype: str, device: str, word: str) -> None:
    with pytest.raises(ValueError, match=word):
        backend_constants(backend, dtype, device=device, alpha=1.0, b0_gib=1.0)


def test_the_chunk_matches_the_torch_trainers() -> None:
    from t1_trainer.logprobs import LOGIT_CHUNK

    assert TORCH_LOGIT_CHUNK == LOGIT_CHUNK


@pytest.mark.parametrize("rows", [0, -1, 2.5, True])
def test_logit_rows_must_be_a_positive_integer(rows) -> None:
    with pytest.raises(ValueError, match="logit_rows"):
        CapacityConstants(logit_rows=rows)


def test_a_chunked_head_prices_min_of_wall_and_chunk() -> None:
    from t1_capacity.shapes import ModelShape
    from t1_spec import load_recipe

    model = ModelShape.from_spec(load_recipe(TINY).model)
    last = stages(model, 1)[-1]
    chunked = CapacityConstants(logit_bytes=12.0, logit_rows=256)
    for wall, rows in ((100, 100), (256, 256), (4096, 256)):
        plan = Plan(token_wall=wall, memory_budget_gib=95.0)
        assert logit_buffer_bytes(model, plan, last, chunked, ACTOR) == rows * V * 12
        assert logit_buffer_bytes(model, plan, last, PAPER_CONSTANTS, ACTOR) == wall * V * 6
        assert logit_buffer_bytes(model, plan, last, chunked, CRITIC) == 0.0


def test_tiny_cpu_gate_is_within_30_percent_of_its_measured_peak() -> None:
    """recipes/tiny-cpu.yaml trains with the torch backend in float32: the gate prices what it allocates.

    Measured here (2026-12-04, this machine, 2 cores): ``/usr/bin/time -v uv run t1 train
    recipes/tiny-cpu.yaml`` (2 PPO steps, 106 s) peaked at 2,788,712 kB RSS = 2.66 GiB (the largest process
    of the run, the one that holds engine and trainer: interpreter and libraries included). Eq. 21's Megatron
    layout priced 11.56 GiB co-resident (5.68 GiB of it a logit buffer the torch trainer never allocates); the
    torch layout with the paper stack's alpha and b0 6.49 GiB. With the torch backend's calibrated activation
    model and b0 (``coefficients/torch-cpu.json``, fitted from ``tools/bench/bench_memory.py``) it prices
    2.21 GiB: within 30% of the measured peak.
    """
    inputs = load(TINY)
    assert inputs.constants.logit_rows == TORCH_LOGIT_CHUNK and inputs.constants.weight_bytes == 4.0
    assert inputs.constants.activations is not None  # the stored calibration, not alpha
    actor = footprint(inputs.model, inputs.plan, inputs.constants, ACTOR)
    assert actor.term("logit_buffer").bytes == TORCH_LOGIT_CHUNK * V * 12  # 0.71 GiB, not 4096 rows
    measured_peak_gib = 2_788_712 * 1024 / GIB
    verdict = check_plan(inputs.model, inputs.plan, inputs.constants)
    assert abs(verdict.coresident_gib / measured_peak_gib - 1.0) <= 0.30, verdict.coresident_gib
    wall = check_plan(inputs.model, inputs.plan, replace(inputs.constants, **_paper_bytes()))
    assert verdict.coresident_gib < wall.coresident_gib - 5.0  # the phantom logit buffer is gone


def _paper_bytes() -> dict:
    c = PAPER_CONSTANTS
    return {
        "weight_bytes": c.weight_bytes,
        "grad_bytes": c.grad_bytes,
        "optimizer_bytes": c.optimizer_bytes,
        "logit_bytes": c.logit_bytes,
        "logit_rows": None,
        "activations": None,
        "alpha": c.alpha,
        "b0_gib": c.b0_gib,
    }


def test_the_paper_recipe_keeps_eq21() -> None:
    """recipes/t1-122b.yaml trains with megatron: its constants are Eq. 21's, logit buffer over the wall."""
    inputs = load(PROD)
    assert inputs.constants.logit_rows is None and inputs.constants.logit_bytes == 6.0
    assert inputs.constants.weight_bytes == 2.0 and inputs.constants.optimizer_bytes == 12.0
