"""How ``t1 tasks stats`` prints a ``PoolReport`` in the terminal (the numbers are ``t1_tasks.stats``'s)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape

from t1_tasks import PoolReport
from t1_tasks.stats import PAPER_PER_ASSERTION_FRACTION, CountSummary, text_histogram

PAPER_SCALE_NOTE = "T1 §5.2: S = 20 near the p90 of T1-15k, whose median is 4 and max about 35"


def _summary(s: CountSummary | None) -> str:
    return "-" if s is None else f"median {s.median:g}, p90 {s.p90:g}, max {s.max:g}"


def _seconds(s: CountSummary) -> str:
    return f"median {s.median:.1f} s, max {s.max:.1f} s"


def print_report(
    out: Console,
    r: PoolReport,
    *,
    record: Path | None,
    record_pool: str | None,
    recipe: Path | None,
    recipe_note: str | None,
) -> None:
    """Print the observed counts, the suggested S, report share, runtimes and histogram (after the mix).

    Args:
        out: where to print.
        r: the report.
        record: the ``--validated`` file, or None.
        record_pool: the pool the record says it validated.
        recipe: the ``--recipe`` file, or None.
        recipe_note: why the recipe has no ``reward.scale`` (a ratio or binary reward), or None.
    """
    if record is None:
        out.print(
            "observed: no validation record (write one with `t1 tasks validate --record FILE`, then pass "
            "--validated FILE)",
            style="dim",
            soft_wrap=True,
        )
    else:
        out.print(
            f"observed (record {escape(str(record))} of {escape(record_pool or '?')}, {r.record_tasks} of "
            f"{r.n_tasks} tasks): {_summary(r.observed_summary)}",
            soft_wrap=True,
        )
    basis = "observed where recorded, else static" if record is not None else "static"
    out.print(f"assertions ({basis}): {_summary(r.summary)}")
    if r.suggested_scale is not None:
        line = f"suggested S = ceil(p90) = {r.suggested_scale}"
        if r.recipe_scale is not None:
            line += f"; recipe {escape(str(recipe))}: reward.scale = {r.recipe_scale}"
        elif recipe_note:
            line += f"; recipe {escape(str(recipe))}: {escape(recipe_note)}"
        out.print(f"{line} ({PAPER_SCALE_NOTE})", soft_wrap=True)
    if r.per_assertion_report_fraction is not None:
        out.print(
            f"per-assertion reports (CTRF or JUnit): {r.per_assertion_reports} of {r.record_tasks} tasks "
            f"({r.per_assertion_report_fraction:.0%}; the paper's pre-flight found "
            f"{PAPER_PER_ASSERTION_FRACTION:.0%}, T1 §3.1)",
            soft_wrap=True,
        )
    if r.runtimes:
        parts = []
        if "oracle_solve_s" in r.runtimes:
            parts.append(f"solution/solve.sh {_seconds(r.runtimes['oracle_solve_s'])}")
        if "verifier_s" in r.runtimes:
            parts.append(f"verifier {_seconds(r.runtimes['verifier_s'])}")
        out.print("runtimes of the oracle check: " + "; ".join(parts), soft_wrap=True)
    lines = text_histogram(list(r.counts.values()))
    if lines:
        out.print("histogram (assertions | tasks):")
        for line in lines:
            out.print("  " + escape(line), soft_wrap=True)
