"""``engine.kind: sglang`` from a recipe: server command lines, preflight lines, ``t1 recipe validate``."""

from pathlib import Path

import torch
from typer.testing import CliRunner

from t1.cli import app
from t1_rollout.engine.sglang import SGLangReplicas
from t1_rollout.engine.sglang.launch import server_command
from t1_spec import load_recipe

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "recipes" / "tiny-cpu.yaml"
URL = ["engine.kind=sglang", "engine.urls=[http://10.0.0.5:30000]"]
JOIN = [*URL, "engine.weight_sync=disk", "engine.weights_dir=/shared/t1-weights"]


def test_server_command_of_the_paper_recipe_fills_the_inference_partition():
    recipe = load_recipe(REPO / "recipes" / "t1-122b.yaml")
    spec, plan = recipe.engine, recipe.plan
    cmds = [
        server_command(
            spec, replica=i, model_path="/w/v0", dtype="bfloat16", first_device=plan.training_devices
        )
        for i in range(spec.replicas)
    ]
    first = cmds[0]
    assert first[1:3] == ["-m", "sglang.launch_server"]
    assert first[first.index("--tp") + 1] == "8" and first[first.index("--model-path") + 1] == "/w/v0"
    assert "--enable-return-routed-experts" in first and "--skip-tokenizer-init" in first
    assert first[first.index("--weight-version") + 1] == "0"
    gpus = [int(c[c.index("--base-gpu-id") + 1]) for c in cmds]
    ports = [int(c[c.index("--port") + 1]) for c in cmds]
    # 128 devices, 64 for inference: 8 replicas of tp 8 on devices 64..127, one port each
    assert gpus == [64 + 8 * i for i in range(8)] and gpus[-1] + 8 == plan.devices
    assert ports == [30000 + i for i in range(8)]


def test_server_args_pass_through_verbatim():
    recipe = load_recipe(TINY, [*JOIN, "engine.server_args=[--mem-fraction-static,'0.8']"])
    cmd = server_command(recipe.engine, replica=0, model_path="/m", dtype="float32", first_device=0)
    assert cmd[-2:] == ["--mem-fraction-static", "0.8"]


def test_launching_without_sglang_or_cuda_is_one_clear_line():
    recipe = load_recipe(REPO / "recipes" / "t1-122b.yaml")
    problems = SGLangReplicas.preflight(recipe)
    launch = [p for p in problems if p.startswith("engine.kind 'sglang'")]
    assert len(launch) == 1
    assert "launching servers needs the sglang package and CUDA devices" in launch[0]
    assert "give engine.urls of running servers or use engine.kind: embedded" in launch[0]


def test_joining_by_url_with_disk_sync_is_runnable_without_sglang():
    assert SGLangReplicas.preflight(load_recipe(TINY, JOIN)) == []


def test_disk_sync_with_urls_needs_a_shared_weights_dir():
    assert SGLangReplicas.preflight(load_recipe(TINY, [*URL, "engine.weight_sync=disk"])) == [
        "engine.weights_dir: weight_sync 'disk' with engine.urls needs a directory every server reads (the "
        "default is a temporary directory on this machine); set engine.weights_dir"
    ]


def test_distributed_sync_needs_cuda_here():
    problems = SGLangReplicas.preflight(load_recipe(TINY, URL))  # weight_sync defaults to distributed
    expected = (
        []
        if torch.cuda.is_available()
        else [
            "engine.weight_sync 'distributed': the NCCL broadcast needs a CUDA device in the trainer's "
            "process (none visible here); use engine.weight_sync: disk"
        ]
    )
    assert problems == expected


def test_recipe_validate_accepts_sglang_with_urls(tmp_path):
    overrides = [*JOIN, f"logging.run_root={tmp_path}"]
    result = CliRunner().invoke(app, ["recipe", "validate", str(TINY), *overrides])
    assert result.exit_code == 0, result.output
    assert "engine.kind 'sglang'" not in result.output
