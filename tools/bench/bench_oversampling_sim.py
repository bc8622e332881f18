"""Simulate heavy-tailed trial durations through the real admission policy: step time and retention by length.

Run (from the repository root):

    uv run python tools/bench/bench_oversampling_sim.py [--seeds 5] [--steps 4] [--launched 560]
        [--admitted 512] [--long-turns 64] [--max-resumes 1]

The admission policy is the real one: `t1_rollout.scheduler.collect_batch` with a `SchedulerConfig` (token
bucket of 6 creations per second under a 600 per minute quota, T1 §7.3; ``concurrency`` = launched, every
trial in flight at once as on the paper's sandbox fleet), on an asyncio event loop whose clock is virtual:
``asyncio.sleep`` advances it and nothing sleeps for real, so an hour-long step simulates in well under a
second. Each fake trial sleeps its simulated duration; when the scheduler cancels it, it records the turns it
had completed, as `t1_rollout.trial.run_trial` leaves a cancelled record's partial episode in place. Retention
by length is read from `BatchResult.metrics` (`t1_rollout.retention`).

Trial model (common random numbers: task k has the same plan in every arm of a seed):

- agent turns N ~ LogNormal(median ``--turns-median`` 24, sigma ``--turns-sigma`` 0.8), rounded, at least 1;
- seconds per turn, one per trial, ~ LogNormal(median ``--turn-s-median`` 25 s, sigma 0.4), and sampled
  tokens per turn ~ LogNormal(median 400, sigma 0.5);
- sandbox start ~ LogNormal(median 20 s, sigma 0.3), verifier ~ LogNormal(median 30 s, sigma 0.5);
- the agent phase stops at the 3600 s agent deadline (T1 §7.3) with the turns it completed, then the verifier
  runs.

The agent phase N x (seconds per turn) is log-normal with sigma sqrt(0.8^2 + 0.4^2) = 0.89 around a median of
600 s (heavy-tailed: its p99 is about 8x its median), and log duration and log turns correlate at 0.8 / 0.89 =
0.89: long trajectories take long. "Long" means a trajectory of at least ``--long-turns`` (64, about the 89th
percentile of N) turns at its end.

Three arms per seed, ``--steps`` steps each:

- ``oversampled``: ``--launched`` 560 for ``--admitted`` 512 (T1 §7.4); the cancelled tail is dropped;
- ``no_oversampling``: 512 launched for 512: every trial is admitted and the step waits for the slowest;
- ``continuation``: 560 for 512 with the training loop's own partial-rollout continuation (T1 §10,
  `t1_rollout.continuation`, ``rollout.continuation``): when the batch is full the tail is parked at a turn
  boundary (a turn in progress is discarded and sampled again after the resume; a trial in its verifier
  finishes within the park bound of 60 s, ``park_timeout_s``'s default, and is carried as a finished
  record), continued first in step t+1 under the same plan with its completed turns kept and no second
  sandbox start, fresh tasks filling the rest of the 560; a trial continued ``--max-resumes`` times (1,
  the recipe's default) is cancelled like a plain tail. Its trials run turn by turn (one sleep per turn,
  so they have boundaries to park at); the other two arms' trials sleep their whole plan at once, as
  before. The agent deadline caps a plan's turns as drawn: the time of a discarded partial turn is not
  charged to it (the loop stops the deadline while parked, not while re-sampling).

Figures, per seed and then min / median / max over seeds:

- step time: the batch's admission wall on the virtual clock (``BatchResult.wall_s``), mean over steps 2..S
  (step 1 of the continuation arm has nothing to continue). It is the rollout's part of a step; the training
  compute that the one-step asynchronous loop overlaps with it is not modelled;
- long-trajectory retention: of the long trials launched fresh in steps 1..S-1, the fraction admitted in any
  step up to S (for the arms without continuation, in their own step);
- long share admitted: long trials among all admitted ones, against the long share among fresh launches (the
  unbiased share);
- retention by final length: per power-of-two turn bucket of the trial's final length, the fraction of
  trials launched fresh in steps 1..S-1 that were admitted (summed over seeds); and the run's own metric
  ``retention_by_turns`` (turns reached when cancelled), summed over every step and seed.

Ratios: step time oversampled / no_oversampling (the named baseline) and continuation / oversampled; long
retention continuation / oversampled. Nothing asserts. Ends with one JSON line of the figures.

Measured 2026-12-01 (2 shared CPU cores, defaults), median over seeds (min-max): step time 2136 s
oversampled, 3742 s without oversampling (ratio 0.57, 0.54-0.61); retention of trajectories of >= 64 turns
0.42 (0.41-0.45) oversampled; long share of the admitted 0.053 oversampled against 0.114 launched. Measured
2026-12-02 with the continuation arm on the real `Continuation` (271 s of real time; the two other arms gave
the same figures): step time 2044 s with continuation (0.96 of oversampled, 0.95-0.97), retention of
trajectories of >= 64 turns 1.00 (2.4x, 2.23-2.47), all 48 continued trials of each step admitted in the next.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import selectors
import statistics
import time
from dataclasses import dataclass

import numpy as np

from t1_rollout.continuation import Continuation, ContinuationConfig
from t1_rollout.harness import Episode
from t1_rollout.parking import ParkRequested
from t1_rollout.retention import length_bucket
from t1_rollout.scheduler import BatchResult, SchedulerConfig, collect_batch
from t1_spec import ContinuationSpec
from t1_tito import Turn

AGENT_DEADLINE_S = 3600.0  # T1 §7.3, rollout.agent_deadline_s
CREATION_RATE_PER_S = 6.0  # T1 §7.3
CREATION_QUOTA_PER_MIN = 600.0  # T1 §7.3
ARMS = ("oversampled", "no_oversampling", "continuation")
PARK_TIMEOUT_S = ContinuationSpec.model_fields["park_timeout_s"].default  # rollout.continuation's, 60 s


TICK_S = 1e-6
"""Virtual seconds every loop iteration costs. A real clock always moves; without the tick, a timer due
within one float ulp of now (a token bucket short by 1e-16 of a token) would fire and re-arm forever."""


class _AdvancingSelector(selectors.DefaultSelector):
    """A selector that never waits: it moves the virtual clock to the next timer (plus `TICK_S`)."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list:
        ready = super().select(0)
        if ready or timeout is None:  # no timer at all: wait for real (a deadlock would show as one)
            return ready or super().select(timeout)
        self.now += max(0.0, timeout) + TICK_S
        return ready


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio event loop on a virtual clock, seconds from 0: timers fire in order, with no real wait."""

    def __init__(self) -> None:
        self._virtual = _AdvancingSelector()
        super().__init__(self._virtual)

    def time(self) -> float:
        return self._virtual.now


@dataclass(frozen=True)
class Plan:
    """One simulated trial: sandbox start, seconds and tokens per turn, planned turns, verifier (seconds)."""

    start_s: float
    turn_s: float
    tokens_per_turn: int
    turns: int
    verifier_s: float

    @property
    def agent_s(self) -> float:
        return min(self.turns * self.turn_s, AGENT_DEADLINE_S)

    @property
    def final_turns(self) -> int:
        return min(self.turns, math.floor(AGENT_DEADLINE_S / self.turn_s))

    @property
    def total_s(self) -> float:
        return self.start_s + self.agent_s + self.verifier_s

    def turns_by(self, elapsed_s: float) -> int:
        """Turns completed after ``elapsed_s`` seconds of the trial's timeline."""
        return max(0, min(self.final_turns, math.floor((elapsed_s - self.start_s) / self.turn_s)))


def draw_plans(n: int, seed: int, args: argparse.Namespace) -> list[Plan]:
    rng = np.random.default_rng(seed)
    turns = np.maximum(1, np.rint(rng.lognormal(math.log(args.turns_median), args.turns_sigma, n))).astype(
        int
    )
    turn_s = rng.lognormal(math.log(args.turn_s_median), 0.4, n)
    tokens = np.maximum(1, np.rint(rng.lognormal(math.log(400), 0.5, n))).astype(int)
    start = rng.lognormal(math.log(20), 0.3, n)
    verifier = rng.lognormal(math.log(30), 0.5, n)
    return [
        Plan(float(start[k]), float(turn_s[k]), int(tokens[k]), int(turns[k]), float(verifier[k]))
        for k in range(n)
    ]


@dataclass(frozen=True)
class SimTask:
    """The scheduler's view of a task (``id`` and ``category``, as `t1_tasks.Task`)."""

    id: str
    category: str = "sim"


def _episode(plan: Plan, turns: int) -> Episode:
    out = range(plan.tokens_per_turn)  # only the count matters to the retention tables
    return Episode(
        turns=[
            Turn(prompt_ids=[0], output_ids=out, output_logprobs=(), policy_version=0, finish_reason="stop")
        ]
        * turns
    )


class Source:
    """Fresh tasks, each plan once, as a `TaskSource` (the continued ones come from the `Continuation`)."""

    def __init__(self) -> None:
        self.next_fresh = 0
        self.fresh_this_step: list[int] = []

    def draw(self, n: int, *, exclude: frozenset[str] = frozenset()) -> list[tuple[int, SimTask]]:
        del exclude  # a fresh plan is never one a continued trial holds
        self.fresh_this_step = list(range(self.next_fresh, self.next_fresh + n))
        self.next_fresh += n
        return [(0, SimTask(f"t{k}")) for k in self.fresh_this_step]


async def _run_arm(arm: str, plans: list[Plan], args: argparse.Namespace) -> dict:
    loop = asyncio.get_running_loop()
    launched = args.admitted if arm == "no_oversampling" else args.launched
    config = SchedulerConfig(
        launched=launched,
        admitted=args.admitted,
        concurrency=launched,
        creation_rate_per_s=CREATION_RATE_PER_S,
        creation_quota_per_min=CREATION_QUOTA_PER_MIN,
    )
    source = Source()
    continuation = None
    if arm == "continuation":
        continuation = Continuation(ContinuationConfig(args.max_resumes, PARK_TIMEOUT_S))

    async def run_whole(task: SimTask, record):
        plan, t0 = plans[int(task.id[1:])], loop.time()
        try:
            await asyncio.sleep(plan.total_s)
        except asyncio.CancelledError:
            record.episode = _episode(plan, plan.turns_by(loop.time() - t0))
            record.status, record.cause = "cancelled", "sim: cancelled by the scheduler"
            raise
        record.episode = _episode(plan, plan.final_turns)
        record.status = "finished"
        return record

    async def run_by_turn(task: SimTask, record):
        plan, parking, done = plans[int(task.id[1:])], record.parking, 0
        record.episode = _episode(plan, 0)
        # the agent phase as turns, the deadline's cut of a capped plan as one last partial piece
        pieces = [plan.turn_s] * plan.final_turns + [plan.agent_s - plan.final_turns * plan.turn_s]
        try:
            await asyncio.sleep(plan.start_s)
            for piece in pieces:
                while True:
                    await parking.boundary()
                    try:
                        await parking.unless_asked(asyncio.sleep(piece))
                    except ParkRequested:
                        continue  # the partial turn is discarded and sampled again after the resume
                    break
                done = min(done + 1, plan.final_turns)
                record.episode = _episode(plan, done)
            await asyncio.sleep(plan.verifier_s)
        except asyncio.CancelledError:
            record.status, record.cause = "cancelled", "sim: cancelled by the scheduler"
            raise
        record.status = "finished"
        return record

    run_one = run_whole if continuation is None else run_by_turn
    steps, fresh_by_step, admitted_step, tables = [], [], {}, []
    for step in range(args.steps):
        carried = {int(t[1:]) for t in continuation.task_ids()} if continuation is not None else set()
        batch: BatchResult = await collect_batch(
            source, run_one, config, clock=loop.time, continuation=continuation
        )
        kept = [int(r.task_id[1:]) for r in batch.admitted]
        steps.append((batch.wall_s, sum(k in carried for k in kept)))
        fresh_by_step.append(source.fresh_this_step)
        admitted_step.update(dict.fromkeys(kept, step))
        tables.append(batch.metrics()["retention_by_turns"])
    if continuation is not None:
        await continuation.cancel_all("the simulation ended")
    return {"steps": steps, "fresh": fresh_by_step, "admitted": admitted_step, "tables": tables}


def _summarize(run: dict, plans: list[Plan], long_turns: int) -> dict:
    walls = [w for w, _ in run["steps"]]
    early = [k for ks in run["fresh"][:-1] for k in ks]  # launched fresh before the last step
    long_early = [k for k in early if plans[k].final_turns >= long_turns]
    admitted = run["admitted"]
    fresh = [k for ks in run["fresh"] for k in ks]
    return {
        "step_s": statistics.fmean(walls[1:]) if len(walls) > 1 else walls[0],
        "long_retention": sum(k in admitted for k in long_early) / len(long_early) if long_early else None,
        "long_share_admitted": sum(plans[k].final_turns >= long_turns for k in admitted) / len(admitted),
        "long_share_launched": sum(plans[k].final_turns >= long_turns for k in fresh) / len(fresh),
        "continued_admitted_per_step": statistics.fmean(c for _, c in run["steps"]),
        "by_final_turns": _bucket_counts(early, admitted, plans),
    }


def _bucket_counts(keys: list[int], admitted: dict, plans: list[Plan]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for k in keys:
        row = out.setdefault(length_bucket(plans[k].final_turns), [0, 0])
        row[0] += 1
        row[1] += k in admitted
    return out


def _by_length(rows: dict) -> list[tuple[str, object]]:
    """``rows.items()`` in ascending order of their power-of-two length buckets (`length_bucket`)."""
    return sorted(rows.items(), key=lambda item: int(item[0].split("-")[0]))


def _stats(xs: list[float | None]) -> dict[str, float] | None:
    """min / median / max of the values that exist (None where none does)."""
    xs = [x for x in xs if x is not None]
    return {"min": min(xs), "median": statistics.median(xs), "max": max(xs)} if xs else None


def _ratios(top: list[dict], bottom: list[dict], key: str) -> dict[str, float] | None:
    """Per-seed ``top[key] / bottom[key]``, as min / median / max; a seed without both figures is left out."""
    return _stats(
        [t[key] / b[key] if t[key] is not None and b[key] else None for t, b in zip(top, bottom, strict=True)]
    )


def _merge_tables(into: dict, table: dict) -> None:
    for bucket, row in table.items():
        acc = into.setdefault(bucket, dict.fromkeys(("launched", "kept", "cancelled", "continued"), 0))
        for key in acc:
            acc[key] += row[key]


def simulate(args: argparse.Namespace) -> dict:
    """Every arm over every seed; per-seed summaries, the merged retention tables and the ratios."""
    per_arm: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    by_len: dict[str, dict[str, list[int]]] = {arm: {} for arm in ARMS}
    metric_tables: dict[str, dict] = {arm: {} for arm in ARMS}
    for seed in range(args.seeds):
        plans = draw_plans(args.launched * args.steps, seed, args)
        for arm in ARMS:
            loop = VirtualTimeLoop()
            try:
                run = loop.run_until_complete(_run_arm(arm, plans, args))
            finally:
                loop.close()
            summary = _summarize(run, plans, args.long_turns)
            per_arm[arm].append(summary)
            for bucket, (n, kept) in summary.pop("by_final_turns").items():
                row = by_len[arm].setdefault(bucket, [0, 0])
                row[0], row[1] = row[0] + n, row[1] + kept
            for table in run["tables"]:
                _merge_tables(metric_tables[arm], table)
    over, base, cont = (per_arm[a] for a in ARMS)
    ratios = {
        "step_oversampled_over_no_oversampling": _ratios(over, base, "step_s"),
        "step_continuation_over_oversampled": _ratios(cont, over, "step_s"),
        "long_retention_continuation_over_oversampled": _ratios(cont, over, "long_retention"),
    }
    figures = {arm: {key: _stats([s[key] for s in per_arm[arm]]) for key in per_arm[arm][0]} for arm in ARMS}
    retention_by_final_turns = {
        arm: {b: {"launched": n, "admitted": k, "retention": k / n} for b, (n, k) in _by_length(rows)}
        for arm, rows in by_len.items()
    }
    return {
        "figures": figures,
        "ratios": ratios,
        "retention_by_final_turns": retention_by_final_turns,
        "retention_by_turns_metric": {arm: dict(_by_length(t)) for arm, t in metric_tables.items()},
    }


def _print_table(tables: dict[str, dict], kept: str) -> None:
    buckets = [b for b, _ in _by_length({b: 0 for t in tables.values() for b in t})]
    print(f"  {'turns':10s}" + "".join(f"{a:>24s}" for a in ARMS))
    for b in buckets:
        rows = [tables[a].get(b, {"launched": 0, kept: 0}) for a in ARMS]
        cells = [f"{r[kept] / r['launched']:.3f} ({r['launched']})" if r["launched"] else "-" for r in rows]
        print(f"  {b:10s}" + "".join(f"{c:>24s}" for c in cells))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5, help="simulated runs, one seed each (default 5)")
    ap.add_argument("--steps", type=int, default=4, help="steps per simulated run (default 4)")
    ap.add_argument(
        "--launched", type=int, default=560, help="trials launched per step with oversampling (T1 §7.4: 560)"
    )
    ap.add_argument("--admitted", type=int, default=512, help="trials admitted per step (T1 §7.4: 512)")
    ap.add_argument(
        "--turns-median",
        type=float,
        default=24.0,
        help="median turns of a trajectory (log-normal; default 24)",
    )
    ap.add_argument(
        "--turns-sigma", type=float, default=0.8, help="log-normal sigma of the turn count (default 0.8)"
    )
    ap.add_argument(
        "--turn-s-median",
        type=float,
        default=25.0,
        help="median seconds per turn (log-normal, sigma 0.4; default 25)",
    )
    ap.add_argument(
        "--max-resumes",
        type=int,
        default=1,
        help="steps one trial may be continued in (rollout.continuation.max_resumes; default 1)",
    )
    ap.add_argument(
        "--long-turns",
        type=int,
        default=64,
        help="turns from which a trajectory counts as long in the retention figures (default 64)",
    )
    args = ap.parse_args(argv)
    if args.steps < 2:
        ap.error("--steps must be >= 2: continuation needs a step to continue into")
    # bad sizes are usage errors (exit 2) named by option, not tracebacks from the scheduler or NumPy
    for name in ("seeds", "admitted", "long_turns", "max_resumes"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.launched < args.admitted:
        ap.error(f"--launched {args.launched} must be >= --admitted {args.admitted} (T1 §7.4 launches more)")
    for name in ("turns_median", "turn_s_median"):
        if not getattr(args, name) > 0:
            ap.error(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
    if not args.turns_sigma >= 0:
        ap.error(f"--turns-sigma must be >= 0, got {args.turns_sigma}")
    t0 = time.perf_counter()
    out = simulate(args)
    sim_s = time.perf_counter() - t0

    def mmm(s: dict | None) -> str:
        return f"{s['min']:8.3f} {s['median']:8.3f} {s['max']:8.3f}" if s else f"{'n/a':>26s}"

    print(
        f"{args.seeds} seeds x {args.steps} steps; {args.launched} launched / {args.admitted} admitted; "
        f"simulated in {sim_s:.1f} s (virtual clock)"
    )
    print(f"{'figure (min median max over seeds)':38s}" + "".join(f"{a:>28s}" for a in ARMS))
    for key in out["figures"]["oversampled"]:
        print(f"{key:38s}" + "".join(f"{mmm(out['figures'][a][key]):>28s}" for a in ARMS))
    print("ratios (min median max over seeds)")
    for key, s in out["ratios"].items():
        print(f"  {key:46s} {mmm(s)}")
    print(f"retention by final turns: admitted / launched fresh in steps 1..{args.steps - 1}, all seeds")
    _print_table(out["retention_by_final_turns"], "admitted")
    print("the run's metric retention_by_turns (turns reached when cancelled): kept / launched, all steps")
    _print_table(out["retention_by_turns_metric"], "kept")
    head = {
        "bench": "oversampling_sim",
        "seeds": args.seeds,
        "steps": args.steps,
        "max_resumes": args.max_resumes,
    }
    print(json.dumps({**head, "launched": args.launched, "admitted": args.admitted, "sim_s": sim_s, **out}))


if __name__ == "__main__":
    main()
