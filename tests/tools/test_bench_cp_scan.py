"""The context-parallel scan benchmark (tools/bench/bench_cp_scan.py) on a short micro-batch: it ends with
its JSON line, and each rank's saved activations are 1/cp of one rank's (T1 §7.1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # a subprocess importing torch and transformers, then two ranks: over 20 s on a busy box
def test_saved_activations_per_rank_halve_at_cp2() -> None:
    cmd = [
        sys.executable,
        str(ROOT / "tools" / "bench" / "bench_cp_scan.py"),
        "--tokens",
        "2048",
        "--cps",
        "2",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    figures = json.loads(res.stdout.strip().splitlines()[-1])
    assert figures["bench"] == "cp_scan" and figures["device"] == "cpu"
    one, two = figures["rows"]
    assert (one["cp"], two["cp"]) == (1, 2)  # the cp = 1 baseline is always measured
    assert abs(two["saved_bytes"] / one["saved_bytes"] - 0.5) < 0.01
    assert "cuda_peak_bytes" not in two


def test_tokens_that_do_not_split_into_whole_chunks_are_refused() -> None:
    cmd = [sys.executable, str(ROOT / "tools" / "bench" / "bench_cp_scan.py"), "--tokens", "1000"]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert res.returncode != 0 and "must be a positive multiple of 1024 for cp=1" in res.stderr
