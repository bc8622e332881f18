"""The oversampling simulation (tools/bench/bench_oversampling_sim.py) on a small batch: its virtual clock and
what oversampling and continuation must do to step time and long-trajectory retention (T1 §7.4, §10)."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sim():
    spec = importlib.util.spec_from_file_location(
        "bench_oversampling_sim", ROOT / "tools" / "bench" / "bench_oversampling_sim.py"
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_oversampling_sim"] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


def _args(**kw):
    base = dict(
        seeds=2, steps=3, launched=70, admitted=64, turns_median=24.0, turns_sigma=0.8, turn_s_median=25.0,
        long_turns=48, max_resumes=1,
    )  # fmt: skip
    return argparse.Namespace(**{**base, **kw})


def test_the_virtual_clock_runs_an_hour_at_once(sim):
    loop = sim.VirtualTimeLoop()
    try:
        order = []

        async def sleeper(name, s):
            await asyncio.sleep(s)
            order.append((name, loop.time()))

        async def both():
            await asyncio.gather(sleeper("late", 3600.0), sleeper("early", 60.0))

        loop.run_until_complete(both())
    finally:
        loop.close()
    assert [n for n, _ in order] == ["early", "late"]
    assert order[0][1] == pytest.approx(60.0, abs=1e-3) and order[1][1] == pytest.approx(3600.0, abs=1e-3)


def test_a_plan_stops_at_the_agent_deadline(sim):
    plan = sim.Plan(start_s=20.0, turn_s=100.0, tokens_per_turn=10, turns=50, verifier_s=30.0)
    assert plan.final_turns == 36  # 3600 s / 100 s per turn (T1 §7.3 agent deadline)
    assert plan.total_s == pytest.approx(20 + 3600 + 30)
    assert (plan.turns_by(10.0), plan.turns_by(20.0 + 250.0), plan.turns_by(1e9)) == (0, 2, 36)


def test_oversampling_shortens_the_step_and_continuation_keeps_the_long_tail(sim):
    out = sim.simulate(_args())
    fig, ratios = out["figures"], out["ratios"]
    # 64 of 64 admitted: the step waits for the slowest trial and keeps every long one
    assert fig["no_oversampling"]["long_retention"]["min"] == 1.0
    assert ratios["step_oversampled_over_no_oversampling"]["max"] < 1.0
    # the cancelled tail is the long tail: oversampling drops long ones, continuation admits them a step later
    assert fig["oversampled"]["long_retention"]["max"] < 1.0
    assert fig["continuation"]["long_retention"]["min"] > fig["oversampled"]["long_retention"]["max"]
    assert fig["oversampled"]["long_share_admitted"]["max"] < fig["oversampled"]["long_share_launched"]["min"]
    assert fig["continuation"]["continued_admitted_per_step"]["min"] > 0
    assert fig["oversampled"]["continued_admitted_per_step"]["max"] == 0
    # the run's own metric counts every launched trial of every step
    launched = sum(r["launched"] for r in out["retention_by_turns_metric"]["oversampled"].values())
    assert launched == 2 * 3 * 70
    # with the loop's continuation, the tail is parked (outcome continued), not cancelled, in each step
    cont = out["retention_by_turns_metric"]["continuation"].values()
    assert sum(r["continued"] for r in cont) > 0 and sum(r["launched"] for r in cont) == 2 * 3 * 70


def test_the_first_step_of_oversampling_is_never_slower(sim):
    # the 64th finish among 70 trials comes no later than the last of their first 64 (same plans, same pacing)
    args = _args(seeds=1, steps=2)
    plans = sim.draw_plans(args.launched * args.steps, 0, args)
    walls = {}
    for arm in ("oversampled", "no_oversampling"):
        loop = sim.VirtualTimeLoop()
        try:
            walls[arm] = loop.run_until_complete(sim._run_arm(arm, plans, args))["steps"][0][0]
        finally:
            loop.close()
    # creation pacing (T1 §7.3): the bucket holds 6, then one more every 1/6 s, in launch order
    ends = [max(0, k - 5) / 6 + p.total_s for k, p in enumerate(plans[:64])]
    assert walls["no_oversampling"] == pytest.approx(max(ends), abs=1e-2)
    assert walls["oversampled"] <= walls["no_oversampling"] + 1e-3


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--seeds", "0"], "--seeds must be >= 1, got 0"),
        (["--admitted", "0", "--launched", "4"], "--admitted must be >= 1, got 0"),
        (["--launched", "4", "--admitted", "8"], "--launched 4 must be >= --admitted 8"),
        (["--turns-sigma", "-1"], "--turns-sigma must be >= 0, got -1.0"),
        (["--turns-median", "0"], "--turns-median must be > 0, got 0.0"),
        (["--steps", "1"], "--steps must be >= 2"),
    ],
)
def test_bad_sizes_are_usage_errors_named_by_option(sim, capsys, argv, named):
    with pytest.raises(SystemExit) as exit_info:
        sim.main(argv)
    assert exit_info.value.code == 2
    assert named in capsys.readouterr().err
