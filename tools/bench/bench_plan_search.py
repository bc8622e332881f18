"""Benchmark: plan search over 1,024 training devices (issue 4: must finish in under 2 s).

Run: uv run python tools/bench/bench_plan_search.py [--devices 1024] [--repeat 5]

Prints the best-of-N wall time of ``t1_capacity.search_plans`` and, measured in the same run, a named
baseline: "naive" = brute-force enumeration of every (tp, pp, cp, dp, ep) 5-tuple followed by a full
``check_plan`` (both networks' ``Footprint`` objects, every term) on each valid plan (layout rules and the
batch split over dp, ``ppo.batch_splits_dp``, as the search applies them). Nothing asserts.

Measured 2026-11-29 (2 shared CPU cores): 715 valid plans, 428 admitted over 1,024 devices; search_plans
~19 ms, naive ~680 ms.
"""

from __future__ import annotations

import argparse
import time
from itertools import product

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


def best_of(fn, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    base = Plan(token_wall=86_016, memory_budget_gib=95.0)
    t_search, result = best_of(
        lambda: search_plans(PAPER_MODEL, base, PAPER_CONSTANTS, args.devices), args.repeat
    )
    t_naive, n_naive = best_of(lambda: naive(args.devices, base), max(1, args.repeat // 2))
    print(f"devices {args.devices}: {result.n_plans} valid plans, {len(result.fitting)} admitted")
    print(f"search_plans                      {t_search * 1e3:9.1f} ms  (budget 2000 ms)")
    print(f"baseline naive 5-tuple + check    {t_naive * 1e3:9.1f} ms  ({n_naive} admitted)")
    print(f"speed-up vs naive                 {t_naive / t_search:9.1f} x")


if __name__ == "__main__":
    main()
