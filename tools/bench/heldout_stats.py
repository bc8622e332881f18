"""Statistics of the held-out learning benchmark (`bench_heldout.py`): intervals and paired tests, each named.

Every figure comes with the test that produced it (the ``test`` key of each result), so nothing is quoted
without its test:

- `mean_interval`: a mean over held-out tasks (each task's mean over its attempts, the unit of sampling)
  with the two-sided Student t interval (scipy.stats.t).
- `trend`: the OLS slope of a curve over its steps with the two-sided p of the t distribution on n - 2
  degrees of freedom (scipy.stats.linregress), not a normal approximation.
- `paired`: the paired difference of two arms over matched units (steps of one seed, or seeds), its mean
  with its t interval, the paired t-test (scipy.stats.ttest_rel) and the Wilcoxon signed-rank test
  (scipy.stats.wilcoxon, exact for small samples), both two-sided. Successive steps of one run share a
  policy, so a test over steps treats dependent points as independent (optimistic); the test over seeds is
  the one whose units are independent. With 3 seeds the smallest two-sided Wilcoxon p is 0.25: three seeds
  can show a consistent sign, not a significant one under that test.
- `summarize`: the benchmark's table from its JSON lines: per arm and seed the held-out metric at the first
  and the last evaluation with its interval, the paired difference between two arms over steps (per seed)
  and over seeds (the last evaluation, and the change from the first), and over (seed, held-out task)
  units at the last evaluation (the tasks are the sample a held-out claim is about; one seed's tasks share
  a policy).

scipy is in the lock (a dependency of datasketch, which t1-tasks uses for MinHash).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from scipy import stats

__all__ = ["mean_interval", "paired", "summarize", "trend"]

METRICS = ("resolved", "reward")


def mean_interval(values: Sequence[float], confidence: float = 0.95) -> dict[str, Any]:
    """The mean of ``values`` and its two-sided Student t interval (n - 1 degrees of freedom).

    Returns:
        ``n``, ``mean``, ``lo``, ``hi`` and ``test`` (``"student t interval, 95%"``); with one value the
        bounds are None (no spread to estimate).

    Raises:
        ValueError: no values.
    """
    n = len(values)
    if n == 0:
        raise ValueError("mean_interval: no values")
    mean = sum(values) / n
    out: dict[str, Any] = {"n": n, "mean": mean, "lo": None, "hi": None}
    out["test"] = f"student t interval, {confidence:.0%}"
    if n > 1:
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
        half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)
        out["lo"], out["hi"] = mean - half, mean + half
    return out


def trend(y: Sequence[float]) -> dict[str, Any]:
    """OLS slope of ``y`` against its index and the two-sided p of the t test on n - 2 degrees of freedom.

    The p is None where the test is undefined (every point on the line: no residual variance), so the
    benchmark's JSON line holds no NaN.

    Raises:
        ValueError: fewer than 3 points (no degree of freedom left).
    """
    if len(y) < 3:
        raise ValueError(f"trend: {len(y)} points, need at least 3")
    fit = stats.linregress(range(len(y)), list(y))
    p = None if math.isnan(fit.pvalue) else float(fit.pvalue)  # a flat curve: no residual, no test
    return {"slope": float(fit.slope), "p": p, "n": len(y), "test": "OLS slope, t test"}


def paired(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> dict[str, Any]:
    """The paired difference ``a - b`` over matched units, with the paired t-test and the Wilcoxon test.

    Args:
        a: one arm's metric per unit (step or seed).
        b: the other arm's, in the same order.
        confidence: of the mean difference's interval.

    Returns:
        ``n``; ``diff`` (`mean_interval` of the differences); ``above`` (units where a > b), ``ties``;
        ``t_test`` and ``wilcoxon``, each ``{"test", "statistic", "p"}`` (two-sided; p None where the test
        is undefined: fewer than 2 units, or every difference 0; the t-test's also where every difference is
        the same, which leaves no spread).

    Raises:
        ValueError: the sequences differ in length or are empty.
    """
    if len(a) != len(b) or not a:
        raise ValueError(f"paired: {len(a)} and {len(b)} values, need the same non-zero number")
    d = [x - y for x, y in zip(a, b, strict=True)]
    out: dict[str, Any] = {
        "n": len(d),
        "diff": mean_interval(d, confidence),
        "above": sum(x > 0 for x in d),
        "ties": sum(x == 0 for x in d),
    }
    undefined = len(d) < 2 or all(x == 0 for x in d)
    # every difference the same: no spread, so the t statistic is not finite (scipy warns); no p, as for n < 2
    t = None if undefined or len(set(d)) == 1 else stats.ttest_rel(a, b)
    w = None if undefined else stats.wilcoxon(d, zero_method="wilcox", alternative="two-sided")
    out["t_test"] = {
        "test": "paired t-test, two-sided",
        "statistic": None if t is None else float(t.statistic),
        "p": None if t is None or math.isnan(t.pvalue) else float(t.pvalue),
    }
    out["wilcoxon"] = {
        "test": "Wilcoxon signed-rank, two-sided",
        "statistic": None if w is None else float(w.statistic),
        "p": None if w is None else float(w.pvalue),
    }
    return out


def _per_task(row: dict[str, Any], metric: str) -> list[float]:
    """Each held-out task's mean of ``metric`` over its attempts (the row's ``per_task``)."""
    return [float(v[metric]) for _, v in sorted(row["per_task"].items()) if v.get(metric) is not None]


def summarize(rows: Iterable[dict[str, Any]], *, metric: str = "resolved") -> dict[str, Any]:
    """The benchmark's figures from its rows (one per arm, seed and evaluation step).

    Args:
        rows: dicts with ``arm``, ``seed``, ``step``, ``per_task`` (task id -> ``{"resolved", "reward"}``,
            means over attempts) and the overall figures.
        metric: ``resolved`` (share of attempts that resolved their task) or ``reward`` (mean dense reward).

    Returns:
        ``per_run``: ``{arm: {seed: {"start", "end"}}}`` (`mean_interval` over tasks at the first and the
        last evaluation, with their steps, and the `trend` of the overall metric when 3 or more evaluations
        exist); ``arms``: for every pair of arms, ``over_steps`` per seed (`paired` over the evaluations
        after the first, steps both arms reached) and ``over_seeds`` (`paired` over the seeds both ran: the
        last evaluation, and the change from the first) and ``over_tasks`` (`paired` over every
        (seed, held-out task) at the last common evaluation; tasks of one seed share a policy, so this
        test's units are not independent across a seed's tasks).

    Raises:
        ValueError: an unknown metric.
    """
    if metric not in METRICS:
        raise ValueError(f"summarize: metric {metric!r}, known are {', '.join(METRICS)}")
    curves: dict[str, dict[int, dict[int, dict[str, Any]]]] = defaultdict(lambda: defaultdict(dict))
    for row in rows:
        curves[row["arm"]][int(row["seed"])][int(row["step"])] = row
    per_run: dict[str, dict[int, Any]] = {}
    for arm, seeds in curves.items():
        per_run[arm] = {}
        for seed, by_step in seeds.items():
            steps = sorted(by_step)
            first, last = by_step[steps[0]], by_step[steps[-1]]
            entry: dict[str, Any] = {
                "start": {"step": steps[0], **mean_interval(_per_task(first, metric))},
                "end": {"step": steps[-1], **mean_interval(_per_task(last, metric))},
            }
            if len(steps) >= 3:
                entry["trend"] = trend([by_step[s][metric] for s in steps])
            per_run[arm][seed] = entry
    arms = sorted(curves)
    pairs: dict[str, Any] = {}
    for i, a in enumerate(arms):
        for b in arms[i + 1 :]:
            pairs[f"{a} - {b}"] = _pair(curves[a], curves[b], metric)
    return {"metric": metric, "per_run": per_run, "arms": pairs}


def _pair(a: dict[int, dict[int, Any]], b: dict[int, dict[int, Any]], metric: str) -> dict[str, Any]:
    """`paired` between two arms: over the common steps after the first per seed, and over common seeds."""
    over_steps: dict[int, Any] = {}
    ends_a, ends_b, gain_a, gain_b = [], [], [], []
    for seed in sorted(set(a) & set(b)):
        steps = sorted(set(a[seed]) & set(b[seed]))
        later = steps[1:]
        if later:
            over_steps[seed] = paired(
                [a[seed][s][metric] for s in later], [b[seed][s][metric] for s in later]
            )
        if steps:
            ends_a.append(a[seed][steps[-1]][metric])
            ends_b.append(b[seed][steps[-1]][metric])
            gain_a.append(ends_a[-1] - a[seed][steps[0]][metric])
            gain_b.append(ends_b[-1] - b[seed][steps[0]][metric])
    out: dict[str, Any] = {"over_steps": over_steps}
    if ends_a:
        out["over_seeds"] = {"end": paired(ends_a, ends_b), "change": paired(gain_a, gain_b)}
    tasks_a, tasks_b = _task_units(a, b, metric)
    if tasks_a:
        out["over_tasks"] = paired(tasks_a, tasks_b)
    return out


def _task_units(
    a: dict[int, dict[int, Any]], b: dict[int, dict[int, Any]], metric: str
) -> tuple[list[float], list[float]]:
    """Each (seed, held-out task)'s metric at the last step both arms reached, one list per arm.

    The held-out tasks are the sample of the task distribution a generalization claim is about, so they
    are the units; the tasks of one seed share a policy, which this pooling ignores (said with the test).
    A task either arm did not finish is left out.
    """
    xs: list[float] = []
    ys: list[float] = []
    for seed in sorted(set(a) & set(b)):
        steps = sorted(set(a[seed]) & set(b[seed]))
        if not steps:
            continue
        ta, tb = a[seed][steps[-1]]["per_task"], b[seed][steps[-1]]["per_task"]
        for task in sorted(set(ta) & set(tb)):
            va, vb = ta[task].get(metric), tb[task].get(metric)
            if va is not None and vb is not None:
                xs.append(float(va))
                ys.append(float(vb))
    return xs, ys
