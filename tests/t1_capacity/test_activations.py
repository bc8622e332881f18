"""The per-backend activation model: per layer kind, fitted from measured runs (T1 §7.1, beyond Eq. 21)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from t1_capacity import ACTOR, CRITIC, footprint, load
from t1_capacity.activations import (
    COEFFICIENTS_DIR,
    KINDS,
    MEASURED_KINDS,
    ActivationModel,
    BackendCoefficients,
    stored,
    widths,
)
from t1_capacity.calibrate_backend import (
    calibrate_from_bench,
    fit_activations,
    kind_counts,
    read_bench,
)
from t1_capacity.footprint import PAPER_CONSTANTS
from t1_capacity.layouts import backend_constants
from t1_capacity.plan import Plan
from t1_capacity.shapes import ModelShape

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "recipes" / "tiny-cpu.yaml"
TRUE = {
    "attention": 5.0,
    "attention_scores": 0.75,
    "gdn": 9.0,
    "moe": 4.5,
    "shared_expert": 4.0,
    "layer": 12.0,
    "embedding": 1.0,
    "head": 8.0,
}
SHAPES = {
    "tiny": [],
    "wide": ["model.hidden_size=128", "model.head_dim=32", "model.moe_intermediate_size=64"],
    "deep": ["model.num_layers=8", "model.num_experts=16", "model.top_k=4"],
}


def test_the_moe_shape_moves_the_activations() -> None:
    """Doubling top_k or the expert FFN raises the MoE kind's width (alpha per layer did not move)."""
    base = ModelShape(hidden_size=64, num_experts=8, top_k=2, moe_intermediate_size=32)
    assert widths(replace(base, top_k=4))["moe"] > widths(base)["moe"]
    assert widths(replace(base, moe_intermediate_size=64))["moe"] > widths(base)["moe"]
    assert widths(replace(base, num_experts=0))["moe"] == 0.0
    assert widths(replace(base, shared_expert_intermediate_size=0))["shared_expert"] == 0.0


@pytest.mark.parametrize(
    ("values", "word"),
    [
        ({**TRUE, "attention": -1.0}, "attention"),
        ({**TRUE, "gdn": float("nan")}, "gdn"),
        ({"moe": 1.0}, "missing"),
    ],
)
def test_bad_coefficients_are_named(values: dict, word: str) -> None:
    with pytest.raises(ValueError, match=word):
        ActivationModel.from_dict(values)


def test_stored_form_round_trips_and_a_bad_file_is_named() -> None:
    c = BackendCoefficients("torch", "float32", ActivationModel.from_dict(TRUE), 0.5, (("command", "x"),))
    assert BackendCoefficients.from_json(c.to_json()) == c
    with pytest.raises(ValueError, match="here.json.*b0_gib"):
        BackendCoefficients.from_json(json.dumps({"backend": "torch"}), "here.json")


def test_eq21_is_unchanged_without_an_activation_model() -> None:
    """The paper's stack: no per-kind model, no edge term, alpha per token per layer."""
    plan = Plan(token_wall=4096, memory_budget_gib=95.0)
    f = footprint(ModelShape(), plan, PAPER_CONSTANTS, ACTOR)
    assert f.gib("edge_activations") == 0.0
    assert f.term("recurrent_activations").bytes == PAPER_CONSTANTS.alpha * 4096 * 36  # 36 of 48 layers GDN
    mega = backend_constants(
        "megatron",
        "bfloat16",
        device="cuda",
        alpha=1.0,
        b0_gib=1.0,
        calibrated_activations=True,
        calibrated_b0=True,
    )
    assert mega.activations is None


def test_the_activation_model_prices_each_kind() -> None:
    model = ModelShape(hidden_size=64, num_layers=4, num_experts=8, top_k=2, moe_intermediate_size=32)
    act = ActivationModel.from_dict(TRUE)
    c = replace(PAPER_CONSTANTS, activations=act)
    plan = Plan(token_wall=1000, memory_budget_gib=95.0)
    f = footprint(model, plan, c, CRITIC)
    w, n = widths(model), kind_counts(model)
    every = sum(TRUE[k] * w[k] for k in ("moe", "shared_expert", "layer"))
    assert f.term("recurrent_activations").bytes == pytest.approx(
        1000 * n["gdn"] * (TRUE["gdn"] * w["gdn"] + every)
    )
    scores = TRUE["attention_scores"] * model.num_attention_heads * 1000  # per token, grows with T
    attn = 1000 * n["attention"] * (TRUE["attention"] * w["attention"] + scores + every)
    assert f.term("attention_activations").bytes == pytest.approx(attn)
    long = footprint(model, replace(plan, token_wall=2000), c, CRITIC).term("attention_activations").bytes
    assert long == pytest.approx(
        2000 * n["attention"] * (TRUE["attention"] * w["attention"] + 2 * scores + every)
    )
    assert f.term("edge_activations").bytes == pytest.approx(1000 * (TRUE["embedding"] + TRUE["head"]) * 64)


def _bench_line(tmp_path: Path, noise: float = 0.0) -> Path:
    """A benchmark JSON line whose activations are exactly the TRUE model's, at 3 shapes x 2 walls."""
    rows = []
    for name, overrides in SHAPES.items():
        model = load(TINY, overrides).model
        w, n = widths(model), kind_counts(model)
        for wall in (1024, 2048):
            by_kind = {k: TRUE[k] * n[k] * wall * w[k] * (1 + noise) for k in MEASURED_KINDS}
            by_kind["attention"] += (
                TRUE["attention_scores"] * n["attention"] * wall * wall * w["attention_scores"]
            )
            net = {"weights": 1e8, "grads": 1e8, "optimizer": 2e8, "logits": 7e8, "activations": 0.0}
            rows.append(
                {
                    "shape": name,
                    "overrides": overrides,
                    "wall": wall,
                    "actor": {**net, "activations": sum(by_kind.values()), "activations_by_kind": by_kind},
                    "critic": {
                        **net,
                        "logits": 0.0,
                        "activations": sum(by_kind.values()),
                        "activations_by_kind": by_kind,
                    },
                    "rss_peak": 3 * 2**30,
                    "rss_base": 5e8,
                }
            )
    path = tmp_path / "bench.jsonl"
    path.write_text("progress text\n" + json.dumps({"bench": "memory", "rows": rows}) + "\n")
    return path


def test_the_fit_recovers_known_coefficients(tmp_path: Path) -> None:
    fitted = fit_activations(read_bench(_bench_line(tmp_path), TINY)).as_dict()
    for kind in KINDS:
        assert fitted[kind] == pytest.approx(TRUE[kind], rel=1e-9), kind


def test_calibrate_from_bench_holds_out_a_case_and_records_provenance(tmp_path: Path) -> None:
    fitted, text = calibrate_from_bench(
        _bench_line(tmp_path), TINY, ["deep@2048"], "t1 plan calibrate x", "box"
    )
    assert "held out (deep@2048)" in text and "in-sample (5 cases)" in text
    prov = dict(fitted.provenance)
    assert (
        prov["command"] == "t1 plan calibrate x"
        and prov["machine"] == "box"
        and prov["held_out"] == "deep@2048"
    )
    assert prov["date"].endswith("Z") and fitted.backend == "torch" and fitted.dtype == "float32"
    assert fitted.activations.as_dict()["gdn"] == pytest.approx(TRUE["gdn"])
    with pytest.raises(ValueError, match="no such case"):
        calibrate_from_bench(_bench_line(tmp_path), TINY, ["huge@1"], "c", "m")


def test_a_file_without_benchmark_rows_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"check": "t1-device-check"}\n')
    with pytest.raises(ValueError, match="no benchmark rows"):
        read_bench(path, TINY)
    path.write_text("{not json\n")
    with pytest.raises(ValueError, match="x.jsonl:1"):
        read_bench(path, TINY)


def test_the_stored_torch_cpu_calibration_has_provenance() -> None:
    c = stored("torch")
    assert c is not None, f"no {COEFFICIENTS_DIR / 'torch-cpu.json'}"
    prov = dict(c.provenance)
    assert {"command", "date", "machine", "data", "held_out"} <= set(prov)
    assert "bench_memory" in prov["command"] or "calibrate" in prov["command"]
    assert c.backend == "torch" and c.dtype == "float32"


def test_a_recipe_with_its_own_alpha_keeps_eq21_activations() -> None:
    """Calibrated coefficients replace alpha and b0 each only where the recipe leaves it at its default."""
    assert load(TINY).constants.activations is not None
    own = load(TINY, ["plan.alpha=1000.0"]).constants
    assert own.activations is None and own.alpha == 1000.0 and own.b0_gib == stored("torch").b0_gib
    mine = load(TINY, ["plan.b0_gib=0.5"]).constants
    assert mine.activations is not None and mine.b0_gib == 0.5
    bf16 = backend_constants(
        "torch",
        "bfloat16",
        device="cpu",
        alpha=1.0,
        b0_gib=1.0,
        calibrated_activations=True,
        calibrated_b0=True,
    )
    fp32 = backend_constants(
        "torch",
        "float32",
        device="cpu",
        alpha=1.0,
        b0_gib=1.0,
        calibrated_activations=True,
        calibrated_b0=True,
    )
    assert bf16.activations.as_dict()["gdn"] == pytest.approx(fp32.activations.as_dict()["gdn"] / 2)


def test_a_cuda_trainer_is_priced_with_the_cuda_calibration_not_the_cpus() -> None:
    """The CPU's coefficients and b0 (RSS, CPU kernels) stay on the CPU; CUDA has its own (the H200 fit)."""
    c = load(TINY, ["trainer.device=cuda"]).constants
    assert c.activations == stored("torch", "cuda").activations != stored("torch", "cpu").activations
    assert c.b0_gib == stored("torch", "cuda").b0_gib and c.weight_bytes == 4.0
