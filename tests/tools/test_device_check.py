"""The device check (`tools/device/check.sh`): its CPU dry run in CI, its refusals, its memory arithmetic."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import time
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
    "size": str,
    "backend": str,
    "skipped": list,
    "preflight": list,
    "gdn_kernel": str,
    "model_overrides": list,
    "params": int,
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


def _run_lines(*args: str, timeout: int = 900) -> tuple[subprocess.CompletedProcess, list[dict]]:
    proc = subprocess.run(
        ["bash", str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"check.sh {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    return proc, [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def _run(*args: str, timeout: int = 900) -> tuple[subprocess.CompletedProcess, dict]:
    proc, lines = _run_lines(*args, timeout=timeout)
    assert len(lines) == 1, f"expected one JSON line on stdout, got {len(lines)}:\n{proc.stdout[-2000:]}"
    return proc, lines[0]


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
    from t1_capacity.activations import stored

    # b0: on the CPU the torch backend's stored calibration (the recipe leaves plan.b0_gib at its default)
    assert mem["allocator_residue"]["predicted_gib"] == pytest.approx(stored("torch").b0_gib)


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
        fp.term(n).bytes
        for n in ("recurrent_activations", "attention_activations", "edge_activations", "logit_buffer")
    )
    assert actor["activations"]["predicted_gib"] == pytest.approx(expected_act / GIB)
    # one LM-head chunk of min(T, 256) rows at 12 B per logit: the torch trainer's chunked head
    assert fp.term("logit_buffer").bytes == pytest.approx(100 * 248_320 * 12)


def test_the_checks_torch_layout_is_the_capacity_models() -> None:
    check = _load_check()
    from t1_capacity.layouts import backend_constants

    c = backend_constants("torch", "float32", device="cuda", alpha=0.0, b0_gib=0.0)
    assert check.TORCH_FP32_BYTES == {k: getattr(c, k) for k in check.TORCH_FP32_BYTES}


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


def test_megatron_is_planned_from_the_registry_or_skipped_with_its_reason() -> None:
    check = _load_check()
    from t1_trainer.base import TRAINER_BACKENDS

    args = check.parse_args(["--dry-run", "--backend", "megatron"])
    units = check.plan_runs(args, "cpu", cuda=False)
    planned = [(u.size, name, u.overrides) for u in units for name, _, _ in u.backends]
    if "megatron" in TRAINER_BACKENDS.kinds():
        # megatron's Gated DeltaNet runs on the CPU (T1's torch kernels): the recipe's own hybrid shape
        assert len(planned) == 1 and planned[0][:2] == ("tiny", "megatron")
        assert check.FULL_ATTENTION not in planned[0][2]
        assert units[0].recipe.model.num_linear_attention_layers > 0
        assert units[0].recipe.model.dtype == "float32"  # bfloat16 only on CUDA
    else:
        assert [p[1] for p in planned] == ["torch"]
        assert units[0].skipped[0].startswith("trainer.backend megatron: skipped (")
        assert "the torch backend trained instead" in units[0].skipped[0]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_check_measures_every_term() -> None:
    _, line = _run(timeout=600)
    assert line["device"].startswith("cuda:") and line["engine_dtype"] == "bfloat16"
    for name, row in _rows(line["memory"]):
        assert row["measured_gib"] is not None and row["measured_gib"] >= 0, name
    assert line["gap_replay"] >= 0 and line["gap_live"] >= 0 and 0 <= line["flip_fraction"] <= 1


# ---- preflight, sizes, backends, exit ------------------------------------------------------------------


def _load_preflight():
    spec = importlib.util.spec_from_file_location(
        "t1_device_check_preflight", ROOT / "tools" / "device" / "check_preflight.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("fla", "triton", "capability", "refused"),
    [
        ("0.4.1", "3.6.0", (9, 0), True),  # the H200's image: Triton 3.6 on Hopper
        ("0.4.1", "3.4.0", (9, 0), True),  # the range's lower end is included
        ("0.4.1", "3.7.0+git1234", (9, 0), True),  # a local build's suffix is read as its release
        ("0.4.1", "3.7.1", (9, 0), False),  # the upper end is excluded: fixed there
        ("0.4.1", "3.3.1", (9, 0), False),
        ("0.4.1", "3.6.0", (8, 0), False),  # Ampere: not affected
        ("0.4.1", "3.6.0", (10, 0), False),  # Blackwell: not affected
        (None, "3.6.0", (9, 0), False),  # no fla: nothing to refuse
        ("0.4.1", None, (9, 0), False),
        ("0.4.1", "3.6.0", None, False),  # no CUDA device
    ],
)
def test_fla_triton_preflight_is_a_function_of_versions_and_capability(
    fla, triton, capability, refused
) -> None:
    pre = _load_preflight()
    line = pre.fla_triton_problem(fla, triton, capability)
    assert (line is not None) == refused
    if refused:
        assert f"Triton {triton}" in line and "compute capability 9.0" in line and "chunk_bwd_dqkwg" in line
        assert "torch implementation" in line


def test_version_tuple_reads_the_leading_release() -> None:
    pre = _load_preflight()
    assert pre.version_tuple("3.6.0") == (3, 6, 0)
    assert pre.version_tuple("3.7") == (3, 7, 0)
    assert pre.version_tuple("3.7.1+cu130") == (3, 7, 1)
    with pytest.raises(ValueError, match="no leading number"):
        pre.version_tuple("dev")


def test_block_fla_makes_transformers_bind_the_torch_gated_delta_rule(tmp_path: Path) -> None:
    """With a stand-in ``fla`` importable, transformers binds it; after `block_fla`, its torch path."""
    fake = tmp_path / "fla"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        "def chunk_gated_delta_rule(q, k, v, g=None, beta=None, **kw):\n"
        "    raise AssertionError('fla used')\n"
    )
    code = (
        "import sys, torch; sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2])\n"
        "import check_preflight as p\n"
        "assert p.installed_fla() is not None\n"
        "if sys.argv[3] == 'block': p.block_fla()\n"
        "from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as m\n"
        "q = torch.randn(1, 4, 2, 8)\n"
        "try:\n"
        "    m.torch_chunk_gated_delta_rule(q, q, q, torch.zeros(1, 4, 2), torch.ones(1, 4, 2))\n"
        "    print('torch')\n"
        "except AssertionError:\n"
        "    print('fla')\n"
    )
    seen = {}
    for mode in ("keep", "block"):
        proc = subprocess.run(
            ["python", "-c", code, str(tmp_path), str(ROOT / "tools" / "device"), mode],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        seen[mode] = proc.stdout.split()[-1]
    assert seen == {"keep": "fla", "block": "torch"}


def test_block_fla_refuses_when_too_late(monkeypatch: pytest.MonkeyPatch) -> None:
    pre = _load_preflight()
    import sys

    monkeypatch.setitem(sys.modules, "transformers.models.qwen3_5_moe.modeling_qwen3_5_moe", object())
    with pytest.raises(RuntimeError, match="already imported"):
        pre.block_fla()


def test_sizes_and_backends_are_comma_lists_checked_before_work() -> None:
    check = _load_check()
    args = check.parse_args(["--dry-run", "--sizes", "tiny,1b,tiny", "--backend", "torch,megatron"])
    assert args.size_list == ["tiny", "1b"] and args.backends == ["torch", "megatron"]
    for bad in (["--sizes", "7b"], ["--backend", "jax"], ["--sizes", ","]):
        with pytest.raises(SystemExit) as e:
            check.parse_args(["--dry-run", *bad])
        assert e.value.code == 2


def test_1b_shape_has_the_stated_parameter_count() -> None:
    """The ``1b`` size's overrides give 1,359,751,232 actor parameters (counted on the meta device)."""
    check = _load_check()
    from t1_policy import build_model
    from t1_spec import load_recipe

    recipe = load_recipe(ROOT / "recipes" / "tiny-cpu.yaml", check.SIZES["1b"])
    m = recipe.model
    assert (m.hidden_size, m.num_layers, m.num_experts, m.top_k, m.vocab_size) == (1024, 8, 64, 8, 248_320)
    assert m.num_layers - m.num_linear_attention_layers == 2 and not m.tie_word_embeddings
    with torch.device("meta"):
        model = build_model(m, seed=0)
    assert sum(p.numel() for p in model.parameters()) == 1_359_751_232


@pytest.fixture(scope="module")
def dry_run_both() -> list[dict]:
    """The JSON lines of one CPU dry run of both sizes and both backends."""
    return _run_lines("--dry-run", "--sizes", "tiny,1b", "--backend", "torch,megatron")[1]


def test_dry_run_of_both_sizes_and_backends_prints_one_line_each(dry_run_both: list[dict]) -> None:
    from t1_trainer.base import TRAINER_BACKENDS

    got = [(r["size"], r["backend"]) for r in dry_run_both]
    if "megatron" in TRAINER_BACKENDS.kinds():
        # one unit per size: megatron trains the shape the torch backend trains (its GDN runs on the CPU)
        assert got == [("tiny", "torch"), ("tiny", "megatron"), ("1b", "torch"), ("1b", "megatron")]
    else:
        assert got == [("tiny", "torch"), ("1b", "torch")]
    for r in dry_run_both:
        for key, kind in TOP_KEYS.items():
            assert isinstance(r[key], kind), f"{r['size']}/{r['backend']}: {key}"
        assert r["gap_replay"] < 1e-4 and r["loss_tokens"] == 12
    big = [r for r in dry_run_both if r["size"] == "1b"]
    for r in big:  # the dry run keeps the 1b shape's layers, experts, top-k and vocabulary
        assert "model.num_experts=64" in r["model_overrides"] and "model.top_k=8" in r["model_overrides"]
        assert "model.hidden_size=64" in r["model_overrides"]
    for r in dry_run_both:
        if r["backend"] == "megatron":
            assert r["gdn_kernel"] == "megatron GatedDeltaNet (torch kernels)"
            assert "model.full_attention_interval=1" not in r["model_overrides"]
            assert r["capacity_constants"]["weight_bytes"] == 4.0  # float32 on the CPU
        else:
            assert r["gdn_kernel"] == "torch" and r["trainer_dtype"] == "float32"


def test_progress_lines_name_every_phase_on_stderr() -> None:
    proc, lines = _run_lines("--dry-run")
    assert len(lines) == 1
    phases = [
        ln.split("] ", 1)[1].split(":", 1)[0]
        for ln in proc.stderr.splitlines()
        if ln.startswith("t1 device check [+")
    ]
    for phase in ("preflight", "build", "sample", "place", "train", "memory", "done"):
        assert phase in phases, phases


def test_a_failure_ends_the_process_at_once_with_its_phase(tmp_path: Path) -> None:
    """A failed phase exits 1 with its phase even while a non-daemon thread (as the engine's) is alive."""
    code = (
        "import sys, threading, time; sys.path.insert(0, sys.argv[1]); import check\n"
        "threading.Thread(target=time.sleep, args=(600,)).start()\n"
        "check.run_and_exit(['--dry-run', '--recipe', sys.argv[2]])\n"
    )
    missing = tmp_path / "no-such-recipe.yaml"
    proc = subprocess.run(
        ["python", "-c", code, str(ROOT / "tools" / "device"), str(missing)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and proc.stdout == ""
    assert "device check failed in preflight after" in proc.stderr and "no-such-recipe.yaml" in proc.stderr


class _FakeCuda:
    """The five ``torch.cuda`` calls `Memory` makes, over scripted allocator figures."""

    def __init__(self) -> None:
        self.alloc = self.peak = self.reserved = 0

    def synchronize(self, device) -> None:
        pass

    def memory_allocated(self, device) -> int:
        return self.alloc

    def max_memory_allocated(self, device) -> int:
        return self.peak

    def max_memory_reserved(self, device) -> int:
        return self.reserved

    def reset_peak_memory_stats(self, device) -> None:
        self.peak = self.reserved = self.alloc


def test_a_run_after_a_larger_one_does_not_inherit_its_peak() -> None:
    check = _load_check()
    memory = check.Memory(torch.device("cpu"))
    cuda = _FakeCuda()
    memory.torch, memory.cuda = type("T", (), {"cuda": cuda})(), True
    memory.start_overall()
    cuda.alloc, cuda.peak, cuda.reserved = 1 << 30, 40 << 30, 41 << 30  # the first run: 40 GiB peak
    assert memory.overall_peak() == 40 << 30
    memory.start_overall()  # the next, smaller run
    cuda.peak, cuda.reserved = 2 << 30, 3 << 30
    assert memory.overall_peak() == 2 << 30 and memory.overall_reserved_peak() == 3 << 30


def test_megatron_rows_put_the_main_copy_with_the_gradients(tiny_model_spec) -> None:
    """megatron: grads = DDP buffer + fp32 main copy (built with the backend), optimizer = Adam m and v."""
    check = _load_check()
    from t1_spec import load_recipe

    recipe = load_recipe(ROOT / "recipes" / "tiny-cpu.yaml")
    pred = check.predicted_terms(recipe, 100, check.megatron_bytes("bfloat16"))
    rec = check.PhaseRecorder(check.Memory(torch.device("cpu")))
    mib = 1 << 20
    rec.marks = {
        "actor/start": {"alloc": 900 * mib, "peak": 900 * mib},
        "actor/pre_step": {"alloc": 900 * mib, "peak": 1300 * mib},
        "actor/end": {"alloc": 1140 * mib, "peak": 1300 * mib},
    }
    table = check.memory_table(pred, rec, {"actor": 60 * mib, "actor_grads": 240 * mib}, backend="megatron")
    actor = table["actor"]
    assert actor["weights"]["measured_gib"] == pytest.approx(60 / 1024)
    assert actor["grads"]["measured_gib"] == pytest.approx(240 / 1024)
    assert actor["optimizer"]["measured_gib"] == pytest.approx(240 / 1024)
    assert actor["activations"]["measured_gib"] == pytest.approx(400 / 1024)
    t = {term.name: term.bytes for term in pred["actor"].terms}
    params_bytes = t["expert_weights"] + t["dense_weights"]  # 2 B per parameter
    assert actor["grads"]["predicted_gib"] == pytest.approx(4 * params_bytes / GIB)  # (4 + 4) B
    assert actor["optimizer"]["predicted_gib"] == pytest.approx(4 * params_bytes / GIB)  # (4 + 4) B
    with pytest.raises(ValueError, match="float16"):
        check.megatron_bytes("float16")


def test_a_run_past_its_time_limit_exits_124_within_the_limit_and_says_so() -> None:
    """check.sh bounds the run (T1_DEVICE_CHECK_TIMEOUT_S): past it the check is ended, 124, one line why."""
    env = {**os.environ, "T1_DEVICE_CHECK_TIMEOUT_S": "2"}
    start = time.monotonic()
    proc = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run"], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env
    )
    elapsed = time.monotonic() - start
    assert proc.returncode == 124, proc.stderr[-2000:]
    assert proc.stdout == "" and "no result within 2 s (T1_DEVICE_CHECK_TIMEOUT_S)" in proc.stderr
    assert elapsed < 2 + 15 + 10  # the limit, the kill-after grace, and uv's start
