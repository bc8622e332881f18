"""What a run prints: one line per trial, the per-step table, progress lines.

Only presentation lives here; every figure comes from the step's metrics row (``metrics.jsonl``), so what the
table shows is what the run directory records.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

COLUMNS = (
    "step",
    "reward",
    "passed",
    "turns",
    "tokens",
    "parse fail",
    "EV",
    "|dlogp| R3",
    "drift",
    "compact ok/fail",
    "trials l/f/x/c",
)
"""The step table's columns, explained one by one in ``docs/getting-started.md``."""


def run_console() -> Console:
    """A console for a run: logs piped to a file keep a wide table instead of rich's 80-column fallback."""
    return Console() if sys.stdout.isatty() else Console(width=160)


def fmt(value: Any) -> str:
    """A metric for the table: ``-`` for missing or non-finite, three decimals for floats."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _sci(value: Any) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.1e}"


def _compaction(row: dict[str, Any]) -> str:
    """Compaction attempts that succeeded / failed, red with a ``!`` when the row carries a warning."""
    if "compaction_attempts" not in row:
        return "-"
    cell = f"{row['compaction_succeeded']}/{row['compaction_failed']}"
    return f"[red]{cell} ![/]" if row.get("compaction_warning") else cell


def metrics_table() -> Table:
    """An empty step table with the `COLUMNS`."""
    table = Table(title=None, show_edge=False, pad_edge=False)
    for col in COLUMNS:
        table.add_column(col, justify="right")
    return table


def add_row(table: Table, row: dict[str, Any]) -> None:
    """Add one step's metrics row (a ``metrics.jsonl`` object) to the step table."""
    table.add_row(
        str(row["step"]),
        fmt(row.get("reward_mean")),
        fmt(row.get("assertions_passed_mean")),
        fmt(row.get("turns_mean")),
        fmt(row.get("tokens_mean")),
        fmt(row.get("parse_failure_rate")),
        fmt(row.get("critic/explained_variance")),
        _sci(row.get("actor/logprob_gap_replay")),
        fmt(row.get("tito_drift_loss_region")),
        _compaction(row),
        f"{row['trials_launched']}/{row['trials_finished']}/{row['trials_failed']}/{row['trials_cancelled']}",
    )


def print_trial(console: Console, label: str, record: Any) -> None:
    """One line for a trial as it ends: its id, status, reward (``-`` when not scored), turns and cause.

    Args:
        console: where to print.
        label: the step's label (``step-0000``, ``warmup-0000``).
        record: the trial's ``t1_rollout.trial.TrialRecord``.
    """
    scored = record.status == "finished" and record.reward is not None and record.reward.value is not None
    reward = f"{record.reward.value:.3f}" if scored else "-"
    turns = len(record.episode.turns) if record.episode else 0
    console.print(
        f"  [dim]{label}[/] {record.trial_id:<36} {record.status:<9} reward {reward:>6} turns {turns}"
        + (f"  [red]{escape(record.cause or '')}[/]" if record.status == "failed" else ""),
        highlight=False,
        soft_wrap=True,
    )


def print_step(console: Console, row: dict[str, Any], *, steps: int, table: bool) -> None:
    """After a PPO step: its table row (when ``logging.print_table``), its warnings, and its wall time.

    A warning of the row (``compaction_warning``: too many summary attempts failed, T1 §9) is printed even
    without the table, so it is never silent.
    """
    if table:
        t = metrics_table()
        add_row(t, row)
        console.print(t)
    print_warnings(console, row)
    console.print(f"[bold]step {row['step'] + 1}/{steps}[/] done in {row['wall_s']['step']:.1f} s")


def print_warnings(console: Console, row: dict[str, Any]) -> None:
    """The warnings a step's metrics row carries (``compaction_warning``), one yellow line each."""
    if row.get("compaction_warning"):
        console.print(
            f"[yellow]warning:[/] {escape(row['compaction_warning'])}", highlight=False, soft_wrap=True
        )


def print_notes(console: Console, recipe: Any, verdict: Any) -> None:
    """The recipe's departures from the paper and the preflight's notes, as validate and train print them.

    Args:
        console: where to print.
        recipe: the loaded ``t1_spec.Recipe`` (its ``advisories()``).
        verdict: its ``t1.run.preflight.Preflight`` (its ``notes``).
    """
    for advisory in recipe.advisories():
        console.print(f"  [yellow]note[/] {advisory.field}: {escape(advisory.message)}", highlight=False)
    for note in verdict.notes:
        console.print(f"  [dim]note {escape(note)}[/]", highlight=False, soft_wrap=True)
