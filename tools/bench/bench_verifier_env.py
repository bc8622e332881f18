"""Time a task's ``test.sh`` in the verifier with the lean environment, against bare ``pytest --version``.

One local sandbox is started from the first task of ``builtin:mini`` (its own ``environment/``, nothing
solved: the tests run and fail, as they would for an agent that did nothing) and its ``tests/`` uploaded
read-only to ``/tests``. Every arm runs in that sandbox through ``LocalSandbox.exec_verifier`` (the same
launch, the same mounts):

- ``bare_pytest_version_s``: ``python3 -m pytest --version`` with the lean environment (pytest's start-up
  alone, the floor a verifier cannot go under);
- ``lean_test_sh_s``: ``bash /tests/test.sh`` with the lean environment (``t1_sandbox.verifier_env``: pytest,
  pytest-json-ctrf and their dependencies), what T1 runs now;
- ``full_test_sh_s``: ``bash /tests/test.sh`` with the project's whole ``site-packages`` mounted as the
  verifier's, as before the lean environment (every pytest plugin installed in the project loads).

The arms run interleaved, one of each per repetition (`paired.interleave`: A B C, then C B A, ...), each ratio
taken within its repetition. Prints min/median/max of each arm and of the paired ratios, then one JSON line.
No assertion on time.

    uv run python tools/bench/bench_verifier_env.py [--runs 10]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import time
from pathlib import Path

import pytest
from paired import interleave, paired_ratios, summary  # tools/bench/paired.py

from t1_sandbox.local import LocalSandbox
from t1_sandbox.local import bwrap as bwrap_module
from t1_sandbox.local import sandbox as sandbox_module
from t1_sandbox.local.toolchain import TOOLCHAIN_MOUNT, VerifierToolchain, toolchain
from t1_tasks import load_pool


def _full(lean: VerifierToolchain) -> VerifierToolchain:
    """``lean`` with the project's whole ``site-packages`` in place of the lean one (the old layout)."""
    site = str(Path(pytest.__file__).resolve().parent.parent)
    mount = f"{TOOLCHAIN_MOUNT}/site-packages"
    binds = tuple((site if dest == mount else src, dest) for src, dest in lean.binds)
    return dataclasses.replace(lean, binds=binds, site=site)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10, help="repetitions, one of each arm")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    print(f"load average at start: {load:.1f} ({os.cpu_count()} CPUs)")
    task = load_pool("builtin:mini").tasks[0]
    lean = toolchain()
    full = _full(lean)
    chosen = {"toolchain": lean}
    # the sandbox looks its toolchain up at every verifier launch: each arm chooses which one it sees
    bwrap_module.toolchain = sandbox_module.toolchain = lambda: chosen["toolchain"]  # type: ignore[assignment]
    loop = asyncio.new_event_loop()
    sandbox = LocalSandbox()
    loop.run_until_complete(sandbox.start(task.environment_dir, timeout_s=300))
    loop.run_until_complete(sandbox.upload(task.tests_dir, "/tests", timeout_s=60, read_only=True))

    def arm(tc: VerifierToolchain, command: str):
        def run() -> float:
            chosen["toolchain"] = tc
            t0 = time.perf_counter()
            r = loop.run_until_complete(sandbox.exec_verifier(command, timeout_s=120))
            elapsed = time.perf_counter() - t0
            assert r.exit_code is not None and not r.timed_out, (command, r, elapsed)
            return elapsed

        return run

    arms = {
        "bare_pytest_version_s": arm(lean, "python3 -m pytest --version"),
        "lean_test_sh_s": arm(lean, "bash /tests/test.sh"),
        "full_test_sh_s": arm(full, "bash /tests/test.sh"),
    }
    for run in arms.values():  # warm every path once, unmeasured
        run()
    for tc, wanted in ((lean, False), (full, True)):  # each arm mounts the environment it is named for
        chosen["toolchain"] = tc
        said = loop.run_until_complete(sandbox.exec_verifier("python3 -m pytest -VV", timeout_s=120))
        if ("hypothesis" in said.stdout + said.stderr) != wanted:
            raise SystemExit(f"the {'whole' if wanted else 'lean'} environment's pytest said: {said.stdout}")
    times = interleave(arms, repeat=args.runs)
    loop.run_until_complete(sandbox.close())
    loop.close()
    out = {name: summary(values) for name, values in times.items()}
    out["lean_test_sh_over_bare_pytest_version"] = summary(
        paired_ratios(times["lean_test_sh_s"], times["bare_pytest_version_s"])
    )
    out["full_test_sh_over_lean_test_sh"] = summary(
        paired_ratios(times["full_test_sh_s"], times["lean_test_sh_s"])
    )
    for name, s in out.items():
        print(f"{name:38s} min {s['min']:.4f}  median {s['median']:.4f}  max {s['max']:.4f}")
    print(
        json.dumps({"bench": "verifier_env", "task": task.id, "runs": args.runs, "load_average": load, **out})
    )


if __name__ == "__main__":
    main()
