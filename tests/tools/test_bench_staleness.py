"""The staleness benchmark (tools/bench/bench_staleness.py): its paired t-test against closed forms, and
the bandit at staleness k trains at 0, 1, ..., k as the k-ahead pipeline does, with TIS applied."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(ROOT / "tools" / "bench"))
    spec = importlib.util.spec_from_file_location(
        "bench_staleness", ROOT / "tools" / "bench" / "bench_staleness.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_student_t_p_matches_closed_forms(bench):
    # one degree of freedom is the Cauchy law: p = 1 - 2 atan(t) / pi; two: p = 1 - t / sqrt(2 + t^2)
    assert bench.t_two_sided_p(5.0, 1) == pytest.approx(1 - 2 * math.atan(5.0) / math.pi, abs=1e-9)
    assert bench.t_two_sided_p(-1.3, 2) == pytest.approx(1 - 1.3 / math.sqrt(2 + 1.69), abs=1e-9)
    assert bench.t_two_sided_p(1.959964, 100000) == pytest.approx(0.05, abs=1e-4)  # the normal limit
    assert bench.t_two_sided_p(0.0, 4) == pytest.approx(1.0)


def test_paired_t_over_seeds(bench):
    got = bench.paired_t([1.0, 2.0, 3.0], [0.0, 0.0, 0.0])  # differences 1, 2, 3: mean 2, sd 1
    assert got["diff"] == 2.0 and got["t"] == pytest.approx(2 * math.sqrt(3))
    assert got["p"] == pytest.approx(1 - got["t"] / math.sqrt(2 + got["t"] ** 2))
    assert bench.paired_t([0.5, 0.5], [0.5, 0.5]) == {"diff": 0.0, "t": 0.0, "p": 1.0}
    assert bench.paired_t([1.0, 1.0], [0.0, 0.0])["t"] is None  # no spread: no t


def test_the_bandit_at_staleness_two_ramps_like_the_pipeline_and_applies_tis(bench):
    recipe = ROOT / "recipes" / "tiny-cpu.yaml"
    run = bench.run_stale(2, "tis", seed=0, steps=4, batch=4, vocab=512, recipe=recipe)
    assert run["staleness"] == [0, 1, 2, 2]
    assert all(math.isfinite(w) for w in run["tis_weight_mean"])  # the correction ran on every step
    none = bench.run_stale(2, "none", seed=0, steps=4, batch=4, vocab=512, recipe=recipe)
    assert all(math.isnan(w) for w in none["tis_weight_mean"])
