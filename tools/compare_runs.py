"""Compare the metrics of two run directories, every value of every row except times.

    uv run python tools/compare_runs.py RUN_DIR_A RUN_DIR_B [--ignore KEY ...]

Reads each ``metrics.jsonl`` and compares the rows one by one: the same number of rows, the same keys in
each row, and the same value under each key, recursively, leaving out wall times (a key ``wall_s``, and
any key ending in ``_s``, at any depth) and the keys given with ``--ignore``. Exits 0 when they agree, 1
with one line per difference otherwise. Meant for a refactor that must not change what a seeded run
computes.

Two runs of the same code with the same seed can still differ in what the wall clock decides: on
``recipes/tiny-cpu.yaml`` the trial cancelled as the oversampling tail (T1 §7.4) is cut wherever it was
when the batch filled, so the buckets it lands in (``retention_by_turns``, ``retention_by_tokens``) varied
between two runs of one commit here; every other value matched. Compare against more than one run before
calling such a key a regression, or ``--ignore`` it and say so.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

IGNORED: set[str] = set()
"""Keys left out of the comparison besides times (``--ignore``)."""


def is_time(key: str) -> bool:
    """Whether ``key`` holds a wall time (seconds), which differs between any two runs, or is ignored."""
    return key == "wall_s" or key.endswith("_s") or key in IGNORED


def differences(a: Any, b: Any, where: str) -> list[str]:
    """One line per place where ``a`` and ``b`` differ, times left out."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        ka = [k for k in a if not is_time(k)]
        kb = [k for k in b if not is_time(k)]
        if set(ka) != set(kb):
            out.append(
                f"{where}: keys only in A {sorted(set(ka) - set(kb))}, only in B {sorted(set(kb) - set(ka))}"
            )
        for k in ka:
            if k in b:
                out += differences(a[k], b[k], f"{where}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} items in A, {len(b)} in B"]
        return [
            line
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for line in differences(x, y, f"{where}[{i}]")
        ]
    return [] if a == b and type(a) is type(b) else [f"{where}: A {a!r}, B {b!r}"]


def rows(run_dir: Path) -> list[dict[str, Any]]:
    """The rows of ``run_dir/metrics.jsonl``."""
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]


def main(argv: list[str]) -> int:
    """Compare two run directories; print the differences; 0 when none."""
    IGNORED.clear()
    paths = [a for a in argv if a != "--ignore"]
    for i, arg in enumerate(argv[:-1]):
        if arg == "--ignore":
            IGNORED.add(argv[i + 1])
            paths.remove(argv[i + 1])
    if len(paths) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    a, b = (rows(Path(p)) for p in paths)
    found = [f"{len(a)} rows in A, {len(b)} in B"] if len(a) != len(b) else []
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        found += differences(x, y, f"row {i + 1} ({x.get('phase')} step {x.get('step')})")
    for line in found:
        print(line)
    left_out = "times" + "".join(f", {k}" for k in sorted(IGNORED))
    verdict = f"identical ({left_out} left out)" if not found else f"{len(found)} differences"
    print(f"{len(a)} rows compared: {verdict}")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
