"""Benchmark: plan search over 1,024 training devices (issue 4: must finish in under 2 s).

Run: uv run python tools/bench/bench_plan_search.py [--devices 1024] [--repeat 5]

Prints the wall time of ``t1_capacity.search_plans`` and, measured in the same run, interleaved with it
(`paired.interleave`: A B, then B A, ...), a named baseline: "naive" = brute-force enumeration of every (tp,
pp, cp, dp, ep) 5-tuple followed by a full ``check_plan`` (both networks' ``Footprint`` objects, every term)
on each valid plan (layout rules and the batch split over dp, ``ppo.batch_splits_dp``, as the search applies
them). Prints min / median / max of both and of the paired ratio naive / search, then one JSON line. Nothing
asserts.

Measured 2026-11-29 (2 shared CPU cores): 715 valid plans, 428 admitted over 1,024 devices; search_plans
~19 ms, naive ~680 ms.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from itertools import product

from paired import format_summary, interleave, paired_ratios, summary  # tools/bench/paired.py

from t1_capacity import (
    PAPER_CONSTANTS,
    PAPER_MODEL,
    Plan,
    batch_splits_dp_ok,
    check_plan,
    plan_problems,
    search_plans,
)


def naive(g: int, base: Plan) -> int:
    admitted = 0
    rng = [d for d in range(1, g + 1) if g % d == 0]
    for tp, pp, cp in product(rng, rng, rng):
        if g % (tp * pp * cp):
            continue
        dp = g // (tp * pp * cp)
        for ep in range(1, PAPER_MODEL.num_experts + 1):
            plan = Plan(tp=tp, pp=pp, cp=cp, dp=dp, ep=ep, token_wall=base.token_wall)
            if plan_problems(plan, PAPER_MODEL) or not batch_splits_dp_ok(plan):
                continue
            admitted += check_plan(PAPER_MODEL, plan, PAPER_CONSTANTS).fits
    return admitted


def timed(fn: Callable[[], object], out: list) -> Callable[[], float]:
    """``fn`` as an arm of `paired.interleave`: seconds per call; its last result kept in ``out``."""

    def arm() -> float:
        t0 = time.perf_counter()
        out[:] = [fn()]
        return time.perf_counter() - t0

    return arm


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    base = Plan(token_wall=86_016, memory_budget_gib=95.0)
    result, n_naive = [], []
    times = interleave(
        {
            "search": timed(lambda: search_plans(PAPER_MODEL, base, PAPER_CONSTANTS, args.devices), result),
            "naive": timed(lambda: naive(args.devices, base), n_naive),
        },
        repeat=args.repeat,
    )
    speedup = paired_ratios(times["naive"], times["search"])
    res = result[0]
    print(f"devices {args.devices}: {res.n_plans} valid plans, {len(res.fitting)} admitted")
    print(format_summary("search_plans s (budget 2 s)", times["search"]))
    print(format_summary(f"baseline naive 5-tuple + check s ({n_naive[0]} admitted)", times["naive"]))
    print(format_summary("speed-up naive / search (paired)", speedup))
    print(
        json.dumps(
            {
                "bench": "plan_search",
                "devices": args.devices,
                "repeat": args.repeat,
                "search_s": summary(times["search"]),
                "naive_s": summary(times["naive"]),
                "naive_over_search": summary(speedup),
            }
        )
    )


if __name__ == "__main__":
    main()
