"""The device check (`tools/device/check.sh`): its CPU dry run in CI, its refusals, its memory arithmetic."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "device" / "check.sh"
GIB = float(1 << 30)

TOP_KEYS = {
    "check": str,
    "device": str,
    "dry_run": bool,
    "backend": str,
    "skipped": list,
    "model": str,
    "engine_dtype": str,
    "trainer_dtype": str,
    "samples": int,
    "prompt_tokens": int,
    "sampled_tokens": int,
    "loss_tokens": int,
    "gap_replay": float,
    "gap_live": float,
    "flip_fraction": float,
    "flip_fraction_layers": float,
    "memory": dict,
    "memory_note": str,
    "capacity_constants": dict,
    "rollout_time_s": float,
    "step_time_s": float,
    "total_time_s": float,
    "versions": dict,
}
NETWORK_TERMS = ("weights", "grads", "optimizer", "activations")


def _load_check():
    spec = importlib.util.spec_from_file_location("t1_device_check", ROOT / "tools" / "device" / "check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(*args: str, timeout: int = 900) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run(
        ["bash", str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"check.sh {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one JSON line on stdout, got {len(lines)}:\n{proc.stdout[-2000:]}"
    return proc, json.loads(lines[0])


def _rows(memory: dict):
    for net in ("actor", "critic"):
        for term in NETWORK_TERMS:
            yield f"{net}.{term}", memory[net][term]
    yield "allocator_residue", memory["allocator_residue"]
    yield "total", memory["total"]


@pytest.fixture(scope="module")
def dry_run() -> dict:
    """The JSON line of one CPU dry run, shared by the tests that read it."""
    return _run("--dry-run")[1]


def test_dry_run_prints_every_key_with_its_type(dry_run: dict) -> None:
    for key, kind in TOP_KEYS.items():
        assert key in dry_run, f"missing key {key}"
        assert isinstance(dry_run[key], kind), f"{key} is {type(dry_run[key]).__name__}, not {kind.__name__}"
    assert dry_run["gap_ratio"] is None or isinstance(dry_run["gap_ratio"], float)
    assert dry_run["device"] == "cpu" and dry_run["dry_run"] is True
    assert dry_run["engine_dtype"] == "float32" and dry_run["trainer_dtype"] == "float32"
    assert dry_run["backend"] == "torch"


def test_dry_run_figures_are_sane(dry_run: dict) -> None:
    for key in ("gap_replay", "gap_live"):
        assert math.isfinite(dry_run[key]) and dry_run[key] >= 0, key
    for key in ("flip_fraction", "flip_fraction_layers"):
        assert 0.0 <= dry_run[key] <= 1.0, key
    assert dry_run["step_time_s"] > 0 and dry_run["rollout_time_s"] > 0
    assert dry_run["total_time_s"] >= dry_run["step_time_s"] + dry_run["rollout_time_s"]
    # every sampled token carries the loss; the dry run's two answers of six tokens each
    assert dry_run["samples"] == 2 and dry_run["loss_tokens"] == dry_run["sampled_tokens"] == 12
    # float32 engine and float32 trainer on the same weights: replayed log-probs agree to float rounding
    assert dry_run["gap_replay"] < 1e-4


def test_dry_run_reports_predictions_and_no_fake_measurement(dry_run: dict) -> None:
    mem = dry_run["memory"]
    for name, row in _rows(mem):
        assert set(row) == {"predicted_gib", "measured_gib", "ratio"}, name
        assert math.isfinite(row["predicted_gib"]) and row["predicted_gib"] >= 0, name
        assert row["measured_gib"] is None and row["ratio"] is None, f"{name}: the CPU measured nothing"
    assert "only on CUDA" in dry_run["memory_note"]
    c = dry_run["capacity_constants"]
    assert (c["weight_bytes"], c["grad_bytes"], c["optimizer_bytes"]) == (4.0, 4.0, 8.0)
    assert c["token_wall"] == 12 + 6  # prompt + sampled tokens of the longest answer
    # the fp32 torch layout: grads as large as weights, AdamW's two moments twice as large
    actor = mem["actor"]
    assert actor["grads"]["predicted_gib"] == pytest.approx(actor["weights"]["predicted_gib"])
    assert actor["optimizer"]["predicted_gib"] == pytest.approx(2 * actor["weights"]["predicted_gib"])
    assert mem["allocator_residue"]["predicted_gib"] == pytest.approx(3.0)  # b0 of the recipe's plan


def test_predicted_weights_match_the_built_networks(dry_run: dict, tiny_model_spec) -> None:
    """Eq. 21's parameter accounting against the parameters the built actor and critic really hold."""
    from t1_policy import Critic, build_model

    actor = build_model(tiny_model_spec, seed=0)
    critic = Critic(actor.model, actor.config.hidden_size, seed=1)
    for name, net in (("actor", actor), ("critic", critic)):
        counted_gib = 4 * sum(p.numel() for p in net.parameters()) / GIB
        predicted = dry_run["memory"][name]["weights"]["predicted_gib"]
        assert predicted == pytest.approx(counted_gib, rel=0.01), name


def test_memory_table_reads_each_phase_from_its_marks(tiny_model_spec) -> None:
    """grads = pre-step - start, optimizer = post-step - pre-step, activations = fwd/bwd peak - pre-step."""
    check = _load_check()
    from t1_spec import load_recipe

    recipe = load_recipe(ROOT / "recipes" / "tiny-cpu.yaml")
    pred = check.predicted_terms(recipe, 100, check.TORCH_FP32_BYTES)
    rec = check.PhaseRecorder(check.Memory(torch.device("cpu")))
    mib = 1 << 20
    rec.marks = {
        "actor/start": {"alloc": 500 * mib, "peak": 500 * mib},
        "actor/pre_step": {"alloc": 620 * mib, "peak": 900 * mib},
        "actor/post_step": {"alloc": 860 * mib, "peak": 900 * mib},
    }
    table = check.memory_table(
        pred, rec, {"actor": 120 * mib, "critic": None, "total": None, "residue": None}
    )
    actor = table["actor"]
    assert actor["weights"]["measured_gib"] == pytest.approx(120 / 1024)
    assert actor["grads"]["measured_gib"] == pytest.approx(120 / 1024)
    assert actor["optimizer"]["measured_gib"] == pytest.approx(240 / 1024)
    assert actor["activations"]["measured_gib"] == pytest.approx(280 / 1024)
    w = actor["weights"]
    assert w["ratio"] == pytest.approx(w["measured_gib"] / w["predicted_gib"])
    assert all(row["measured_gib"] is None and row["ratio"] is None for row in table["critic"].values())
    # the prediction is the sum of the matching Eq. 21 terms, at the token wall given (100 tokens)
    fp = pred["actor"]
    expected_act = sum(
        fp.term(n).bytes for n in ("recurrent_activations", "attention_activations", "logit_buffer")
    )
    assert actor["activations"]["predicted_gib"] == pytest.approx(expected_act / GIB)
    assert fp.term("logit_buffer").bytes == pytest.approx(100 * 248_320 * 4)  # T |V| b_logit, fp32 logits


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_gpu_path_without_cuda_exits_2_with_a_clear_message(capsys: pytest.CaptureFixture) -> None:
    check = _load_check()
    assert check.main([]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no figure at all
    assert "device check failed" in captured.err and "torch sees no CUDA device" in captured.err


def test_bad_sizes_are_refused_before_any_work() -> None:
    check = _load_check()
    with pytest.raises(SystemExit) as e:
        check.parse_args(["--dry-run", "--samples", "0"])
    assert e.value.code == 2
    with pytest.raises(SystemExit):
        check.parse_args(["--dry-run", "--device", "cuda:0"])


def test_megatron_is_taken_from_the_registry_or_skipped_with_its_reason() -> None:
    check = _load_check()
    from t1_trainer.base import TRAINER_BACKENDS

    skipped: list[str] = []
    recipe_path = ROOT / "recipes" / "tiny-cpu.yaml"
    name, cls, recipe = check._choose_backend(recipe_path, ["trainer.device=cpu"], "megatron", skipped)
    if name == "megatron":
        assert "megatron" in TRAINER_BACKENDS.kinds() and not skipped
        assert recipe.trainer.backend == "megatron" and cls.preflight(recipe) == []
    else:
        assert name == "torch" and cls is TRAINER_BACKENDS.load("torch")
        assert recipe.trainer.backend == "torch"
        assert len(skipped) == 1 and skipped[0].startswith("trainer.backend megatron: skipped (")
        assert "the torch backend trained instead" in skipped[0] and "\n" not in skipped[0]
    if "megatron" in TRAINER_BACKENDS.kinds() and not torch.cuda.is_available():
        # the spec's own rule names the field: megatron trains on CUDA devices only
        assert name == "torch" and "trainer.device" in skipped[0]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_check_measures_every_term() -> None:
    _, line = _run(timeout=600)
    assert line["device"].startswith("cuda:") and line["engine_dtype"] == "bfloat16"
    for name, row in _rows(line["memory"]):
        assert row["measured_gib"] is not None and row["measured_gib"] >= 0, name
    assert line["gap_replay"] >= 0 and line["gap_live"] >= 0 and 0 <= line["flip_fraction"] <= 1
