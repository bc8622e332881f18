"""The benchmarks' shared A/B helper (tools/bench/paired.py): arms alternate, ratios pair in order."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load():
    spec = importlib.util.spec_from_file_location("bench_paired", ROOT / "tools" / "bench" / "paired.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


paired = load()


def test_arms_alternate_abba_so_a_drift_charges_both_sides():
    calls: list[str] = []
    arms = {"a": lambda: calls.append("a") or 1.0, "b": lambda: calls.append("b") or 2.0}
    out = paired.interleave(arms, repeat=4)
    assert calls == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert out == {"a": [1.0] * 4, "b": [2.0] * 4}


def test_a_linear_drift_cancels_in_the_paired_ratio_of_abba():
    # Each call costs 1 s plus a load that grows by 1 s per call; A and B are equal, so the ratio is 1 on
    # average. Running all A before all B would report 9/5 = 1.8 for A / B.
    clock = iter(range(100))
    arms = {"a": lambda: 1.0 + next(clock), "b": lambda: 1.0 + next(clock)}
    out = paired.interleave(arms, repeat=4)
    assert out == {"a": [1.0, 4.0, 5.0, 8.0], "b": [2.0, 3.0, 6.0, 7.0]}
    assert sum(out["a"]) == sum(out["b"])


def test_ratios_pair_in_measurement_order_not_sorted():
    assert paired.paired_ratios([3.0, 1.0], [1.0, 2.0]) == [3.0, 0.5]  # sorted pairing would give [1.0, 1.5]


def test_summary_is_min_median_max():
    assert paired.summary([5.0, 1.0, 3.0, 2.0]) == {"min": 1.0, "median": 2.5, "max": 5.0}
    assert "median 2.5" in paired.format_summary("x", [5.0, 1.0, 3.0, 2.0], goal=">= 4")


@pytest.mark.parametrize(
    ("call", "args"),
    [
        ("paired_ratios", ([1.0], [1.0, 2.0])),
        ("paired_ratios", ([1.0], [0.0])),
        ("paired_ratios", ([], [])),
        ("summary", ([],)),
        ("order_of", (["a", "a"], 0)),
        ("order_of", (["a"], -1)),
    ],
)
def test_bad_input_is_refused_by_name(call, args):
    with pytest.raises(ValueError):
        getattr(paired, call)(*args)


def test_zero_repetitions_are_refused():
    with pytest.raises(ValueError, match="repeat=0"):
        paired.interleave({"a": lambda: 1.0}, repeat=0)
