"""Time loading + validating recipes/t1-122b.yaml (issue 3: must take under a second).

Times N runs of ``t1_spec.load_recipe`` (OmegaConf resolution + pydantic validation + every cross-field
rule) and, as the baselines measured in the same run, interleaved with it call by call (`paired.interleave`:
A B C, then C B A, ...), a plain ``yaml.safe_load`` of the same file and a libyaml ``CSafeLoader`` parse
(which the loader itself uses when available). Prints medians and min / median / max of the paired ratios,
the fresh-process figures (interleaved likewise), then one JSON line. No assertion on time.

    uv run python tools/bench/bench_recipe_load.py [--runs 50] [--recipe recipes/t1-122b.yaml]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml
from paired import format_summary, interleave, paired_ratios, summary  # tools/bench/paired.py

from t1_spec import load_recipe

ROOT = Path(__file__).resolve().parents[2]


def timed(fn: Callable[[], object]) -> Callable[[], float]:
    """``fn`` as an arm of `paired.interleave`: the seconds one call took."""

    def arm() -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    return arm


def run_seconds(cmd: list[str]) -> Callable[[], float]:
    """Wall seconds of one fresh process running ``cmd``, as an arm of `paired.interleave`."""
    return timed(lambda: subprocess.run(cmd, check=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "t1-122b.yaml")
    args = ap.parse_args()

    t_cold0 = time.perf_counter()
    load_recipe(args.recipe)
    cold = time.perf_counter() - t_cold0

    path = args.recipe
    c_loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    arms = {
        "load_recipe": timed(lambda: load_recipe(path)),
        "yaml_safe_load": timed(lambda: yaml.safe_load(path.read_text(encoding="utf-8"))),
        "yaml_c_safe_load": timed(
            lambda: yaml.load(path.read_text(encoding="utf-8"), Loader=c_loader)  # noqa: S506 - safe loader
        ),
    }
    for arm in arms.values():  # warm: imports, pydantic schema build, file cache
        arm()
    times = interleave(arms, repeat=args.runs)
    med = {name: statistics.median(values) for name, values in times.items()}
    over_yaml = paired_ratios(times["load_recipe"], times["yaml_safe_load"])
    over_c = paired_ratios(times["load_recipe"], times["yaml_c_safe_load"])
    print(f"recipe: {args.recipe}  runs: {args.runs}")
    print(f"first load_recipe (cold, after import):  {cold * 1e3:8.2f} ms")
    print(f"load_recipe + validate, median:          {med['load_recipe'] * 1e3:8.2f} ms  (target < 1000 ms)")
    print(f"baseline yaml.safe_load (pure Python):   {med['yaml_safe_load'] * 1e3:8.2f} ms")
    print(f"baseline yaml.load CSafeLoader (libyaml):{med['yaml_c_safe_load'] * 1e3:8.2f} ms")
    print(format_summary("load_recipe / yaml.safe_load (paired)", over_yaml))
    print(format_summary("load_recipe / CSafeLoader parse (paired)", over_c))
    fresh = interleave(
        {
            "import": run_seconds([sys.executable, "-c", "import t1_spec"]),
            "import_and_load": run_seconds(
                [sys.executable, "-c", f"import t1_spec; t1_spec.load_recipe({str(path)!r})"]
            ),
        },
        repeat=3,
    )
    fresh_med = {name: statistics.median(values) * 1e3 for name, values in fresh.items()}
    print(f"fresh python: import t1_spec, median:    {fresh_med['import']:8.2f} ms")
    print(f"fresh python: import + load, median:     {fresh_med['import_and_load']:8.2f} ms  (t1 validate)")
    print(
        json.dumps(
            {
                "bench": "recipe_load",
                "runs": args.runs,
                "cold_load_s": cold,
                **{f"{name}_s": summary(values) for name, values in times.items()},
                "load_over_yaml_safe_load": summary(over_yaml),
                "load_over_c_safe_load": summary(over_c),
                **{f"fresh_{name}_s": summary(values) for name, values in fresh.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
