"""The async-loop benchmark's step-time model (tools/bench/bench_async_loop.py), checked by hand."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(ROOT / "tools" / "bench"))
    spec = importlib.util.spec_from_file_location(
        "bench_async_loop", ROOT / "tools" / "bench" / "bench_async_loop.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_pipeline_model_charges_fill_drain_and_publication(bench):
    # R = 10 s rollout, C = 4 s training, P = 1 s publication, 3 steps: batch 0's rollout alone (10), two
    # overlapped steps at max(10, 4) = 10 each, the last training alone (4): 34 s over 3 steps, plus 1 s.
    sync = {"rollout_s": 10.0, "train_s": 4.0, "publish_s": 1.0}
    assert bench.pipeline_model_s(sync, 3) == pytest.approx(34 / 3 + 1)
    # Many steps: the step tends to max(R, C) + P, the paper's T_step plus publication.
    assert bench.pipeline_model_s(sync, 10_000) == pytest.approx(11.0, rel=1e-3)
