"""Pool statistics: assertion-count distribution, the suggested reward scale S, mixes, runtimes, histograms.

The dense reward ``r = P / S`` uses one fixed scale S for the whole run; the paper read S = 20 off the
assertion-count distribution of T1-15k, near its 90th percentile (median 4, max about 35; T1 §5.2). This
module computes the same figures for any pool: from the static counts (``Task.n_assertions``, counted from
``tests/*.py``) and, given a validation record (:mod:`t1_tasks.validation`), from the counts the verifier
reported when the reference solution ran. It also gives the category and difficulty mix (T1 §3.1, Fig. 3),
the oracle's and the verifier's runtimes, and the share of tasks whose verifier writes a per-assertion report
(T1 §3.1: 93% of sampled T1-15k tasks).

Percentiles are linear interpolation between order statistics (numpy's default ``method="linear"``, Hyndman
and Fan type 7): with the n values sorted as x_0 <= ... <= x_{n-1}, the q-th percentile is at position
h = (n - 1) q / 100, ``x_floor(h) + (h - floor(h)) (x_floor(h)+1 - x_floor(h))``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from t1_tasks.pool import Pool
    from t1_tasks.validation import ValidationRecord

__all__ = [
    "PAPER_PER_ASSERTION_FRACTION",
    "CountSummary",
    "PoolReport",
    "percentile",
    "plot_histogram",
    "pool_report",
    "suggested_scale",
    "summarize",
    "text_histogram",
]

PAPER_PER_ASSERTION_FRACTION = 0.93
"""Share of sampled T1-15k tasks whose verifier wrote per-assertion records in the paper's pre-flight
(T1 §3.1)."""


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile of ``values`` by linear interpolation between order statistics.

    Equal to ``numpy.percentile(values, q)`` (its default ``method="linear"``): with the values sorted as
    x_0 <= ... <= x_{n-1} and h = (n - 1) q / 100, the result is x_floor(h) + (h - floor(h)) (x_ceil(h) -
    x_floor(h)). Unsorted input is sorted first.

    Args:
        values: the sample (any order, at least one value).
        q: the percentile in [0, 100].

    Returns:
        The percentile as a float.

    Raises:
        ValueError: ``values`` is empty or ``q`` is outside [0, 100].
    """
    if not values:
        raise ValueError("percentile of an empty sample")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q must lie in [0, 100], got {q}")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return float(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo))


def suggested_scale(p90: float) -> int:
    """The reward scale S suggested by a pool: ``ceil(p90)`` of its assertion counts, at least 1 (T1 §5.2).

    T1 §5.2 sets S = 20 near the 90th percentile of T1-15k's assertion counts; rounding up keeps S an integer
    number of assertions (``reward.scale`` is an integer >= 1) that 90% of tasks cannot exceed.

    Raises:
        ValueError: ``p90`` is negative or not finite.
    """
    if not math.isfinite(p90) or p90 < 0:
        raise ValueError(f"p90 must be a finite number >= 0, got {p90}")
    # p90 interpolates in floating point (24.000000000000004 for a true 24): round off that noise first
    return max(1, math.ceil(round(p90, 9)))


@dataclass(frozen=True)
class CountSummary:
    """Median, 90th percentile and max of a sample (percentiles as in :func:`percentile`).

    Attributes:
        n: values in the sample.
        median: the 50th percentile.
        p90: the 90th percentile.
        max: the largest value.
    """

    n: int
    median: float
    p90: float
    max: float

    def as_dict(self) -> dict[str, float | int]:
        """``{"n", "median", "p90", "max"}`` for JSON."""
        return {"n": self.n, "median": self.median, "p90": self.p90, "max": self.max}


def summarize(values: Sequence[float]) -> CountSummary | None:
    """Median, p90 and max of ``values``; None when it is empty."""
    if not values:
        return None
    return CountSummary(
        n=len(values), median=percentile(values, 50), p90=percentile(values, 90), max=float(max(values))
    )


def text_histogram(counts: Sequence[int | None], *, width: int = 40, max_bins: int = 20) -> list[str]:
    """A terminal histogram of assertion counts: one line per bin, ``?`` for unknown counts.

    Bins are integers from the smallest to the largest count; when there are more than ``max_bins`` values
    in that range, consecutive integers are grouped ``ceil(range / max_bins)`` to a bin (``12-13``). Every
    count lands in exactly one line (``None`` in the ``?`` line), so the numbers at the line ends sum to
    ``len(counts)``.

    Args:
        counts: one assertion count per task (None: unknown).
        width: characters of the longest bar.
        max_bins: most bins before integers are grouped.

    Returns:
        Lines such as ``"   4 | ######## 3"`` (empty for no tasks).
    """
    known = [c for c in counts if c is not None]
    unknown = len(counts) - len(known)
    rows: list[tuple[str, int]] = []
    if known:
        lo, hi = min(known), max(known)
        step = max(1, math.ceil((hi - lo + 1) / max_bins))
        tally = Counter((c - lo) // step for c in known)
        for b in range((hi - lo) // step + 1):
            start = lo + b * step
            label = str(start) if step == 1 else f"{start}-{start + step - 1}"
            rows.append((label, tally.get(b, 0)))
    if unknown:
        rows.append(("?", unknown))
    if not rows:
        return []
    top = max(n for _, n in rows) or 1
    pad = max(len(label) for label, _ in rows)
    return [f"{label:>{pad}} | {'#' * round(width * n / top)} {n}".rstrip() for label, n in rows]


def plot_histogram(
    counts: Sequence[int],
    path: str | Path,
    *,
    title: str,
    p90: float,
    scale: int,
    recipe_scale: int | None = None,
) -> Path:
    """Write a histogram PNG of assertion counts with p90, the suggested S and the recipe's S marked.

    Uses matplotlib's Agg backend (no display needed), imported here so that importing ``t1_tasks`` stays
    light. One bar per integer count, 6.4 x 3.6 inches at 100 dpi.

    Args:
        counts: one known assertion count per task (at least one).
        path: the PNG to write (parent folders created).
        title: the figure title (the pool's source).
        p90: the 90th percentile of ``counts`` (dashed line).
        scale: the suggested S (solid line).
        recipe_scale: the recipe's ``reward.scale`` (dotted line), when given.

    Returns:
        ``path``.

    Raises:
        ValueError: ``counts`` is empty.
        OSError: the file cannot be written.
    """
    if not counts:
        raise ValueError("no known assertion counts to plot")
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tally = Counter(counts)
    xs = sorted(tally)
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=100)
    try:
        ax.bar(xs, [tally[x] for x in xs], width=0.8, color="#4c72b0", label="tasks")
        ax.axvline(
            scale, color="#c44e52", linestyle="-", linewidth=3, alpha=0.5, label=f"suggested S = {scale}"
        )
        ax.axvline(p90, color="#dd8452", linestyle="--", linewidth=1.5, label=f"p90 = {p90:g}")
        if recipe_scale is not None:
            ax.axvline(recipe_scale, color="#55a868", linestyle=":", label=f"recipe S = {recipe_scale}")
        ax.set_xlabel("assertions per task")
        ax.set_ylabel("tasks")
        ax.set_title(title)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.yaxis.get_major_locator().set_params(integer=True)
        ax.legend(fontsize="small")
        fig.tight_layout()
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)
    return path


@dataclass(frozen=True)
class PoolReport:
    """Everything ``t1 tasks stats`` shows about a pool (T1 §3.1, §5.2).

    Attributes:
        source: the pool's source.
        n_tasks: tasks in the pool (broken bundles left out).
        categories: tasks per ``[metadata].category``, sorted by name (T1 Fig. 3).
        difficulties: tasks per ``[metadata].difficulty``, sorted by name.
        static_counts: per task id, ``Task.n_assertions`` (None: unknown without running pytest).
        observed_counts: per task id, the assertions the verifier reported for the reference solution in the
            record (None: not in the record, or no per-assertion report); empty without a record.
        counts: per task id, the count the statistics use: observed when known, else static (None when
            neither is known).
        summary: median, p90 and max of the known ``counts`` (None when none is known).
        static_summary: the same over the static counts only.
        observed_summary: the same over the observed counts only (None without a record).
        suggested_scale: ``ceil(summary.p90)`` (None without counts).
        recipe_scale: the recipe's ``reward.scale`` when a dense-reward recipe was given, else None.
        record_tasks: tasks of the pool found in the record (0 without a record).
        per_assertion_reports: tasks of the pool whose oracle verifier wrote a per-assertion report.
        runtimes: ``"oracle_solve_s"`` and ``"verifier_s"`` summaries (seconds) over the record's oracle
            checks; a key is absent when no such time was recorded.
    """

    source: str
    n_tasks: int
    categories: dict[str, int]
    difficulties: dict[str, int]
    static_counts: dict[str, int | None]
    observed_counts: dict[str, int | None]
    counts: dict[str, int | None]
    summary: CountSummary | None
    static_summary: CountSummary | None
    observed_summary: CountSummary | None
    suggested_scale: int | None
    recipe_scale: int | None
    record_tasks: int
    per_assertion_reports: int
    runtimes: dict[str, CountSummary]

    @property
    def per_assertion_report_fraction(self) -> float | None:
        """Share of the recorded tasks whose verifier wrote a per-assertion report (None without a record)."""
        return self.per_assertion_reports / self.record_tasks if self.record_tasks else None

    def as_json(self) -> dict[str, Any]:
        """One JSON-ready object for ``t1 tasks stats --json``.

        Keys: ``median``, ``p90``, ``max`` and ``suggested_scale`` (None without counts), ``recipe_scale``,
        ``n_tasks``, ``categories``, ``difficulties``, ``static`` and ``observed`` summaries,
        ``per_assertion_report_fraction``, ``runtimes`` (seconds) and per-task counts under ``tasks``.
        """
        s = self.summary
        return {
            "source": self.source,
            "median": s.median if s else None,
            "p90": s.p90 if s else None,
            "max": s.max if s else None,
            "suggested_scale": self.suggested_scale,
            "recipe_scale": self.recipe_scale,
            "n_tasks": self.n_tasks,
            "categories": self.categories,
            "difficulties": self.difficulties,
            "static": self.static_summary.as_dict() if self.static_summary else None,
            "observed": self.observed_summary.as_dict() if self.observed_summary else None,
            "unknown_counts": sum(c is None for c in self.counts.values()),
            "record_tasks": self.record_tasks,
            "per_assertion_reports": self.per_assertion_reports,
            "per_assertion_report_fraction": self.per_assertion_report_fraction,
            "runtimes": {k: v.as_dict() for k, v in self.runtimes.items()},
            "tasks": {
                tid: {"static": self.static_counts[tid], "observed": self.observed_counts.get(tid)}
                for tid in self.counts
            },
        }


def pool_report(
    pool: Pool, record: ValidationRecord | None = None, *, recipe_scale: int | None = None
) -> PoolReport:
    """The statistics of ``pool``, with the observed counts and runtimes of ``record`` when given.

    Args:
        pool: the pool (its good tasks; broken bundles are not part of it).
        record: a validation record of this pool (``t1 tasks validate --record``); its rows for tasks not in
            ``pool`` are ignored.
        recipe_scale: the recipe's ``reward.scale``, shown beside the suggested S.

    Returns:
        The ``PoolReport``.
    """
    static = {t.id: t.n_assertions for t in pool.tasks}
    rows = {t.id: record.get(t.id) for t in pool.tasks} if record is not None else {}
    rows = {k: v for k, v in rows.items() if v is not None}
    observed = {tid: row.observed_assertions for tid, row in rows.items()}
    counts = {tid: observed.get(tid) if observed.get(tid) is not None else static[tid] for tid in static}
    known = [c for c in counts.values() if c is not None]
    summary = summarize(known)
    oracles = [row.oracle for row in rows.values() if row.oracle is not None]
    solve = [c.solve_s for c in oracles if c.solve_s is not None]
    verify = [c.verifier_s for c in oracles if c.verifier_s is not None]
    runtimes = {
        k: v for k, v in (("oracle_solve_s", summarize(solve)), ("verifier_s", summarize(verify))) if v
    }
    return PoolReport(
        source=pool.source,
        n_tasks=len(pool.tasks),
        categories=dict(sorted(Counter(t.category for t in pool.tasks).items())),
        difficulties=dict(sorted(Counter(t.difficulty for t in pool.tasks).items())),
        static_counts=static,
        observed_counts=observed,
        counts=counts,
        summary=summary,
        static_summary=summarize([c for c in static.values() if c is not None]),
        observed_summary=summarize([c for c in observed.values() if c is not None]) if record else None,
        suggested_scale=suggested_scale(summary.p90) if summary else None,
        recipe_scale=recipe_scale,
        record_tasks=len(rows),
        per_assertion_reports=sum(c.per_assertion_report for c in oracles),
        runtimes=runtimes,
    )
