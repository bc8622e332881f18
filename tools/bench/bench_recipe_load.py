"""Time loading + validating recipes/t1-122b.yaml (issue 3: must take under a second).

Prints the median of N runs of ``t1_spec.load_recipe`` (OmegaConf resolution + pydantic validation + every
cross-field rule) and, as the baseline measured in the same run, the median of a plain ``yaml.safe_load`` of
the same file (and a libyaml ``CSafeLoader`` parse, which the loader itself uses when available). No
assertion on time.

    uv run python tools/bench/bench_recipe_load.py [--runs 50] [--recipe recipes/t1-122b.yaml]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from t1_spec import load_recipe

ROOT = Path(__file__).resolve().parents[2]


def median_seconds(fn: Callable[[], object], runs: int) -> float:
    fn()  # warm: imports, pydantic schema build, file cache
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def fresh_process_seconds(recipe: Path, runs: int) -> tuple[float, float]:
    """Median wall time of a fresh interpreter that imports t1_spec, and of one that also loads the recipe."""
    bare = [sys.executable, "-c", "import t1_spec"]
    full = [sys.executable, "-c", f"import t1_spec; t1_spec.load_recipe({str(recipe)!r})"]
    out = []
    for cmd in (bare, full):
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True)
            times.append(time.perf_counter() - t0)
        out.append(statistics.median(times))
    return out[0], out[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "t1-122b.yaml")
    args = ap.parse_args()

    t_cold0 = time.perf_counter()
    load_recipe(args.recipe)
    cold = time.perf_counter() - t_cold0

    text_path = args.recipe
    t_load = median_seconds(lambda: load_recipe(text_path), args.runs)
    t_yaml = median_seconds(lambda: yaml.safe_load(text_path.read_text(encoding="utf-8")), args.runs)
    c_loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    t_cyaml = median_seconds(
        lambda: yaml.load(text_path.read_text(encoding="utf-8"), Loader=c_loader),  # noqa: S506 - safe loader
        args.runs,
    )
    print(f"recipe: {args.recipe}  runs: {args.runs}")
    print(f"first load_recipe (cold, after import):  {cold * 1e3:8.2f} ms")
    print(f"load_recipe + validate, median:          {t_load * 1e3:8.2f} ms  (target < 1000 ms)")
    print(f"baseline yaml.safe_load (pure Python):   {t_yaml * 1e3:8.2f} ms")
    print(f"baseline yaml.load CSafeLoader (libyaml):{t_cyaml * 1e3:8.2f} ms")
    print(f"ratio load_recipe / yaml.safe_load:      {t_load / t_yaml:8.2f} x")
    print(f"ratio load_recipe / CSafeLoader parse:   {t_load / t_cyaml:8.2f} x")
    bare, full = fresh_process_seconds(args.recipe, 3)
    print(f"fresh python: import t1_spec, median:    {bare * 1e3:8.2f} ms")
    print(f"fresh python: import + load, median:     {full * 1e3:8.2f} ms  (what `t1 recipe validate` pays)")


if __name__ == "__main__":
    main()
