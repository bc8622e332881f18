"""Benchmark: the dense reward of a 10,000-assertion CTRF report, T1's full path against json.load + a count.

Run (from the repository root):

    OMP_NUM_THREADS=1 uv run python tools/bench/bench_reward_report.py [--tests 10000] [--repeat 21]

The report is synthetic but shaped as pytest-json-ctrf >= 0.6 writes it (T1 §5.2; reference ``harbor_tb.md``
§1.5): ``reportFormat``/``specVersion``, ``results.tool``, a ``summary`` whose counts match, and one entry per
test with its pytest node id (parametrized cases named ``test_x[case-i]``), ``status``, ``duration`` (ms),
``start``/``stop``, ``filePath``, ``line``, and on failures a ``message`` and a ``trace``. The statuses are
drawn with a fixed seed: about 70% passed, 15% failed, 8% skipped (with a skip reason) and 7% errors, which
pytest-json-ctrf writes as ``failed`` with a setup-phase message (CTRF has no ``error`` status). The file is
written once to a temporary folder (``ctrf.json`` alone, so both arms read the same bytes).

A (T1): ``t1_reward.score_output(folder, DenseRewardSpec())``, what a trial's scoring calls (read, check,
pad, judge), down to ``verdict.reward.value`` = P / S (T1 §5.2, Eq. 20). B (the baseline a capable user
would write): ``json.load`` of the file, then one pass counting ``status == "passed"`` and the total, and
P / S. Both values are checked equal before anything is timed.

Each repetition times ``--inner`` calls of each arm, A and B interleaved (`paired.interleave`: A B, then
B A, ...), and keeps each arm's fastest call; the ratio of a repetition is baseline time / T1 time (speed of
T1 relative to the baseline; goal >= 0.5, i.e. T1 at most twice the baseline's time), printed as
min / median / max, after the load average at the start. Nothing asserts on time. Ends with one JSON
line of the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from paired import format_summary, interleave, paired_ratios, summary  # tools/bench/paired.py

from t1_reward import score_output
from t1_spec import DenseRewardSpec

_MODULES = ("outputs", "cli", "config", "server", "storage", "parser", "cache", "network")
_FAIL_MESSAGES = (
    "The test failed in the call phase due to an assertion error",
    "The test failed in the call phase due to an exception",
)
_ERROR_MESSAGE = "The test failed in the setup phase"


def make_report(n_tests: int, seed: int) -> dict:
    """A CTRF document of ``n_tests`` entries as pytest-json-ctrf >= 0.6 writes it (the module docstring)."""
    rng = random.Random(seed)
    tests, counts = [], {"passed": 0, "failed": 0, "skipped": 0, "pending": 0, "other": 0}
    clock = 1_796_133_971.0
    for i in range(n_tests):
        module = _MODULES[i % len(_MODULES)]
        name = f"tests/test_{module}.py::test_{module}_{i // 40}[case-{i % 40}]"
        duration_ms = round(rng.lognormvariate(0.0, 1.2), 3)
        entry: dict = {
            "name": name,
            "status": "passed",
            "duration": duration_ms,
            "start": round(clock, 3),
            "stop": round(clock + duration_ms / 1000, 3),
            "filePath": f"tests/test_{module}.py",
            "line": 10 + 7 * (i // 40),
            "retries": 0,
            "flaky": False,
            "tags": [],
        }
        clock += duration_ms / 1000
        draw = rng.random()
        if draw < 0.15:
            entry["status"] = "failed"
            entry["message"] = rng.choice(_FAIL_MESSAGES)
            entry["trace"] = (
                f"value = {rng.randint(0, 999)}\n\n>       assert value == {rng.randint(0, 999)}\n"
                f"E       assert {rng.randint(0, 999)} == {rng.randint(0, 999)}\n\n"
                f"tests/test_{module}.py:{entry['line'] + 3}: AssertionError"
            )
        elif draw < 0.23:
            entry["status"] = "skipped"
            entry["message"] = "Skipped: needs network access"
        elif draw < 0.30:
            entry["status"] = "failed"  # an error in setup: pytest-json-ctrf reports it as failed
            entry["message"] = _ERROR_MESSAGE
            entry["trace"] = f"E   FileNotFoundError: fixture data /app/data/{i}.csv is missing"
        counts[entry["status"]] += 1
        tests.append(entry)
    return {
        "reportFormat": "CTRF",
        "specVersion": "0.0.0",
        "results": {
            "tool": {"name": "pytest", "version": "8.4.1"},
            "summary": {"tests": n_tests, **counts, "start": 1_796_133_971.0, "stop": round(clock, 3)},
            "tests": tests,
        },
    }


def baseline_reward(path: Path, scale: int) -> float:
    """B: ``json.load`` then one counting pass: P / S."""
    with path.open(encoding="utf-8") as f:
        tests = json.load(f)["results"]["tests"]
    passed = total = 0
    for t in tests:
        total += 1
        passed += t["status"] == "passed"
    assert total > 0
    return passed / scale


def t1_reward(folder: Path, spec: DenseRewardSpec) -> float:
    """A: T1's scoring of a verifier's output folder, as a trial calls it; the reward value."""
    _report, verdict = score_output(folder, spec)
    value = verdict.reward.value
    assert value is not None, verdict.cause
    return value


def _timed(fn: Callable[[], float], inner: int) -> Callable[[], float]:
    """``fn`` as an arm of `paired.interleave`: the fastest of ``inner`` calls, seconds."""

    def arm() -> float:
        best = float("inf")
        for _ in range(inner):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        return best

    return arm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tests", type=int, default=10_000, help="entries in the report")
    ap.add_argument("--repeat", type=int, default=21, help="interleaved repetitions")
    ap.add_argument("--inner", type=int, default=3, help="calls per arm per repetition (fastest kept)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    load = os.getloadavg()[0]
    print(f"load average at start: {load:.1f}")
    spec = DenseRewardSpec()
    doc = make_report(args.tests, args.seed)
    passed = doc["results"]["summary"]["passed"]
    with tempfile.TemporaryDirectory(prefix="t1-bench-reward-") as tmp:
        folder = Path(tmp)
        path = folder / "ctrf.json"
        path.write_text(json.dumps(doc, indent=2), encoding="utf-8")
        size = path.stat().st_size
        expected = passed / spec.scale  # independent of both arms: the generator's own count
        a, b = t1_reward(folder, spec), baseline_reward(path, spec.scale)
        if not a == b == expected:
            raise SystemExit(f"values differ: t1 {a!r}, baseline {b!r}, expected {expected!r}")
        times = interleave(
            {
                "t1": _timed(lambda: t1_reward(folder, spec), args.inner),
                "baseline": _timed(lambda: baseline_reward(path, spec.scale), args.inner),
            },
            repeat=args.repeat,
        )
    ratio = paired_ratios(times["baseline"], times["t1"])
    print(f"report: {args.tests} tests, {size / 1e6:.2f} MB, P = {passed}, reward P/S = {expected:g}")
    print(format_summary("t1 s      ", times["t1"], digits=4))
    print(format_summary("baseline s", times["baseline"], digits=4))
    print(format_summary("baseline / t1", ratio, goal=">= 0.5"))
    figures = {
        "bench": "reward_report",
        "tests": args.tests,
        "report_bytes": size,
        "repeat": args.repeat,
        "inner": args.inner,
        "seed": args.seed,
        "load_at_start": load,
        "reward": expected,
        "t1_s": summary(times["t1"]),
        "baseline_s": summary(times["baseline"]),
        "baseline_over_t1": summary(ratio),
        "baseline_over_t1_median": statistics.median(ratio),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
