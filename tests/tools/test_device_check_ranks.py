"""`tools/device/check.sh --ranks 2`: the Megatron step on two ranks of one device; dry run and refusals.

The dry run is the whole script on the CPU with gloo (the probe, then one PPO step of the Megatron backend
with ep = 2, dp = 2 on both ranks); the GPU mode (NCCL, both ranks on ``cuda:0``) has not run on this machine.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "device" / "check.sh"


def _run(*args: str, timeout: float) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "T1_DEVICE_CHECK_TIMEOUT_S": str(int(timeout))}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=timeout + 60, cwd=ROOT
    )


def test_ranks_other_than_two_are_refused_before_any_work():
    r = _run("--ranks", "3", "--dry-run", timeout=120)
    assert r.returncode == 2 and "--ranks 3: only 2 is built" in r.stderr, r.stderr[-2000:]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the GPU path runs where CUDA is present")
def test_the_gpu_mode_without_cuda_exits_2_and_says_why():
    r = _run("--ranks", "2", timeout=120)
    assert r.returncode == 2 and "torch sees no CUDA device" in r.stderr, r.stderr[-2000:]


@pytest.mark.slow
def test_dry_run_trains_one_megatron_step_on_two_gloo_ranks():
    pytest.importorskip("megatron.core", reason="megatron-core (t1-trainer[megatron]) is not installed")
    r = _run("--ranks", "2", "--dry-run", timeout=450)
    assert r.returncode == 0, r.stderr[-3000:]
    line = json.loads(r.stdout.strip().splitlines()[-1])
    assert line["backend"] == "gloo" and line["nccl_two_ranks_one_gpu"] is None  # not asked on the CPU
    assert line["plan"]["ep"] == 2 and line["plan"]["dp"] == 2
    rows = line["rank_rows"]
    assert [row["rank"] for row in rows] == [0, 1] and all(row["probe_sum"] == 2.0 for row in rows)
    assert rows[0]["metrics"] == rows[1]["metrics"]  # every rank ran the whole batch: one row
    assert rows[0]["samples_aborted_routing"] == 0
    assert rows[0]["metrics"]["actor/logprob_gap_replay"] < 1e-5  # replayed routing = the sampler's
    assert rows[0]["memory_after_step"] is None  # no fake measurement on the CPU
