"""Paired, interleaved A/B measurement for the benchmarks in this folder: one place for order and statistics.

A benchmark on a shared machine sees the load change while it runs. Measuring every A before every B (or
pairing sorted samples) turns that drift into a false ratio. Here each repetition runs A and B back to back
in alternating order (A B, then B A, ...: an ABBA design, so a steady drift charges both sides alike), the
ratio of a repetition is taken within that repetition, and the spread of those paired ratios is reported as
min / median / max.

Use from a script in ``tools/bench`` (its folder is on ``sys.path`` when run as ``python tools/bench/x.py``)::

    from paired import interleave, paired_ratios, summary

    times = interleave({"t1": run_t1, "baseline": run_baseline}, repeat=5)
    ratio = paired_ratios(times["t1"], times["baseline"])
    print(format_summary("t1 / baseline", ratio, goal="<= 2"))
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence

__all__ = ["format_summary", "interleave", "order_of", "paired_ratios", "summary"]


def order_of(names: Sequence[str], repetition: int) -> list[str]:
    """The order of the arms in repetition ``repetition`` (0-based): as given, then reversed, alternately.

    Args:
        names: the arms, at least one, no duplicate.
        repetition: the repetition's index, >= 0.

    Returns:
        ``names`` for an even repetition, reversed for an odd one (A B, B A, A B, ...).

    Raises:
        ValueError: no arm, a duplicate name, or a negative index.
    """
    if not names or len(set(names)) != len(names):
        raise ValueError(f"arms must be distinct and at least one: {list(names)}")
    if repetition < 0:
        raise ValueError(f"repetition index {repetition} is negative")
    return list(names) if repetition % 2 == 0 else list(reversed(names))


def interleave(arms: Mapping[str, Callable[[], float]], repeat: int) -> dict[str, list[float]]:
    """Runs every arm once per repetition, in `order_of` order, and collects what each returns.

    Args:
        arms: name -> a callable that runs the arm once and returns its figure (e.g. seconds, tokens/s).
        repeat: repetitions, >= 1.

    Returns:
        name -> ``repeat`` figures, index ``i`` from repetition ``i`` (pair them with `paired_ratios`).

    Raises:
        ValueError: ``repeat < 1`` or arms as `order_of` refuses.
    """
    if repeat < 1:
        raise ValueError(f"repeat={repeat} must be >= 1")
    out: dict[str, list[float]] = {name: [] for name in arms}
    for r in range(repeat):
        for name in order_of(list(arms), r):
            out[name].append(float(arms[name]()))
    return out


def paired_ratios(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """``a[i] / b[i]`` for each repetition ``i``: pairs in measurement order, never sorted.

    Raises:
        ValueError: lengths differ, no pair, or a zero in ``b``.
    """
    if len(a) != len(b) or not a:
        raise ValueError(f"paired ratios need equal, non-empty series; got {len(a)} and {len(b)}")
    if any(y == 0 for y in b):
        raise ValueError("paired ratios: the denominator series holds a zero")
    return [x / y for x, y in zip(a, b, strict=True)]


def summary(values: Sequence[float]) -> dict[str, float]:
    """``{"min", "median", "max"}`` of ``values`` (non-empty); ValueError when empty."""
    if not values:
        raise ValueError("summary of no values")
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def format_summary(name: str, values: Sequence[float], *, goal: str = "", digits: int = 3) -> str:
    """One printed line: ``name: min .. median .. max (n=..)`` and the goal if given."""
    s = summary(values)
    line = (
        f"{name}: min {s['min']:.{digits}g}  median {s['median']:.{digits}g}  max {s['max']:.{digits}g}"
        f"  (n={len(values)})"
    )
    return f"{line}  goal {goal}" if goal else line
