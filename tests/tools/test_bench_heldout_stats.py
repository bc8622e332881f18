"""The held-out benchmark's statistics (tools/bench/heldout_stats.py) against tabulated values and counts.

Expected values: Student t quantiles from a t table (t_0.975 with 2 df = 4.303), the exact Wilcoxon
signed-rank null (all n differences positive: two-sided p = 2 / 2**n), and paired t statistics computed
by hand from the differences.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _stats():
    spec = importlib.util.spec_from_file_location(
        "heldout_stats", ROOT / "tools" / "bench" / "heldout_stats.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


hs = _stats()


def test_interval_is_the_student_t_interval_of_the_table():
    out = hs.mean_interval([1.0, 2.0, 3.0])
    half = 4.303 * 1.0 / math.sqrt(3)  # sd 1, t_0.975(2) = 4.303
    assert out["mean"] == 2.0 and out["test"] == "student t interval, 95%"
    assert out["lo"] == pytest.approx(2 - half, abs=1e-3) and out["hi"] == pytest.approx(2 + half, abs=1e-3)
    assert hs.mean_interval([0.5])["lo"] is None
    with pytest.raises(ValueError, match="no values"):
        hs.mean_interval([])


def test_paired_t_statistic_by_hand_and_exact_wilcoxon_of_all_positive_differences():
    a, b = [2.0, 4.0, 6.0, 8.0, 10.0], [1.0, 2.0, 3.0, 4.0, 5.0]  # differences 1..5
    out = hs.paired(a, b)
    t_by_hand = 3.0 / (math.sqrt(2.5) / math.sqrt(5))  # mean 3, sd sqrt(2.5)
    assert out["t_test"]["statistic"] == pytest.approx(t_by_hand)
    assert out["wilcoxon"]["p"] == pytest.approx(2 / 2**5)  # exact null, n = 5, every rank positive
    assert out["above"] == 5 and out["ties"] == 0
    three = hs.paired([1.0, 2.0, 3.0], [0.0, 0.5, 1.0])
    assert three["wilcoxon"]["p"] == pytest.approx(0.25)  # the smallest p three seeds can give


def test_paired_is_undefined_not_zero_without_spread_or_units():
    assert hs.paired([1.0, 1.0], [1.0, 1.0])["t_test"]["p"] is None
    assert hs.paired([1.0], [0.0])["wilcoxon"]["p"] is None
    with pytest.raises(ValueError, match="same non-zero number"):
        hs.paired([1.0], [1.0, 2.0])


def test_trend_uses_the_t_distribution():
    y = [0.0, 1.0, 1.0, 3.0]
    out = hs.trend(y)
    # slope = sum(xc * y) / sum(xc^2) = (-1.5*0 - 0.5*1 + 0.5*1 + 1.5*3) / 5 = 0.9
    assert out["slope"] == pytest.approx(0.9)
    resid = [yy - (1.25 + 0.9 * (x - 1.5)) for x, yy in enumerate(y)]
    se = math.sqrt(sum(r * r for r in resid) / 2 / 5)
    t = 0.9 / se
    # two-sided p of t on 2 df has the closed form 1 - t / sqrt(t^2 + 2)
    assert out["p"] == pytest.approx(1 - t / math.sqrt(t * t + 2))
    with pytest.raises(ValueError, match="need at least 3"):
        hs.trend([1.0, 2.0])
    flat = hs.trend([0.0, 0.0, 0.0])  # the smoke run's curve: a p of NaN would not be valid JSON
    assert flat["slope"] == 0.0 and flat["p"] is None


def _row(arm, seed, step, per_task):
    vals = list(per_task.values())
    return {
        "arm": arm,
        "seed": seed,
        "step": step,
        "resolved": sum(vals) / len(vals),
        "reward": sum(vals) / len(vals) / 5,
        "per_task": {t: {"resolved": v, "reward": v / 5} for t, v in per_task.items()},
    }


def test_summary_pairs_arms_over_steps_and_seeds():
    rows = []
    for seed in (0, 1, 2):
        for step in (0, 2, 4):
            lift = 0.1 * step / 2 + 0.01 * seed
            rows.append(_row("ppo-critic", seed, step, {"t1": 0.2 + lift, "t2": 0.4 + lift}))
            rows.append(_row("shuffled", seed, step, {"t1": 0.2, "t2": 0.4}))
    out = hs.summarize(rows)
    run = out["per_run"]["ppo-critic"][0]
    assert run["start"]["step"] == 0 and run["end"]["step"] == 4
    assert run["start"]["mean"] == pytest.approx(0.3) and run["end"]["mean"] == pytest.approx(0.5)
    pair = out["arms"]["ppo-critic - shuffled"]
    assert sorted(pair["over_steps"]) == [0, 1, 2] and pair["over_steps"][0]["n"] == 2
    assert pair["over_seeds"]["end"]["n"] == 3 and pair["over_seeds"]["end"]["above"] == 3
    assert pair["over_seeds"]["change"]["diff"]["mean"] == pytest.approx(0.2)
    with pytest.raises(ValueError, match="metric 'nope'"):
        hs.summarize(rows, metric="nope")


def test_summary_pairs_arms_over_seed_and_task_units_at_the_last_common_step():
    rows = []
    for seed in (0, 1):
        rows.append(_row("ppo-critic", seed, 0, {"t1": 0.0, "t2": 0.5, "t3": 0.5}))
        rows.append(_row("shuffled", seed, 0, {"t1": 0.0, "t2": 0.5, "t3": 0.5}))
        rows.append(_row("ppo-critic", seed, 4, {"t1": 1.0, "t2": 0.5, "t3": 1.0}))
        rows.append(_row("shuffled", seed, 4, {"t1": 0.5, "t2": 0.5, "t3": 0.5}))
    rows.append(
        _row("ppo-critic", 1, 8, {"t1": 0.0, "t2": 0.0, "t3": 0.0})
    )  # a step the control never reached
    rows[-2]["per_task"]["t3"]["resolved"] = None  # seed 1's control did not finish t3 at step 4
    units = hs.summarize(rows)["arms"]["ppo-critic - shuffled"]["over_tasks"]
    # seed 0: t1 +0.5, t2 0, t3 +0.5; seed 1 (step 4, t3 dropped): t1 +0.5, t2 0
    assert units["n"] == 5 and units["above"] == 3 and units["ties"] == 2
    assert units["diff"]["mean"] == pytest.approx(1.5 / 5)


def test_paired_t_test_is_undefined_when_every_difference_is_the_same():
    out = hs.paired([1.0, 2.0, 3.0], [0.5, 1.5, 2.5])  # every difference 0.5: no spread
    assert out["t_test"]["p"] is None and out["t_test"]["statistic"] is None
    assert out["wilcoxon"]["p"] == pytest.approx(0.25)
