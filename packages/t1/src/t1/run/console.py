"""What a run prints: one line per trial, the per-step table, progress lines and bars.

Only presentation lives here; every figure comes from the step's metrics row (``metrics.jsonl``), so what the
table shows is what the run directory records. On a terminal, `RunProgress` keeps two bars with an ETA at the
bottom (the steps of the current phase and the trials of the current step); piped to a file, nothing but the
lines and the table is printed.
"""

from __future__ import annotations

import math
import sys
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
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

    With partial-rollout continuation, one more line: the trials continued into the step and parked out of it.

    A warning of the row (``compaction_warning``: too many summary attempts failed, T1 §9) is printed even
    without the table, so it is never silent.
    """
    if table:
        t = metrics_table()
        add_row(t, row)
        console.print(t)
    print_warnings(console, row)
    if "trials_parked" in row:  # partial-rollout continuation (rollout.continuation, T1 §10)
        console.print(
            f"continuation: {row['trials_resumed']} continued ({row['trials_resumed_admitted']} admitted, "
            f"{row['trials_cancelled_max_resumes']} cancelled after max_resumes), {row['trials_parked']} "
            f"parked for the next step, {row['trials_cancelled_unparked']} cancelled unparked",
            highlight=False,
        )
    console.print(f"[bold]step {row['step'] + 1}/{steps}[/] done in {row['wall_s']['step']:.1f} s")


def print_warnings(console: Console, row: dict[str, Any]) -> None:
    """The warnings a step's metrics row carries, one yellow line each.

    ``compaction_warning``, and admitted trials scored 0 on a verifier timeout (``fallbacks``): the policy
    of `t1_reward.judge` scores a timeout in a healthy sandbox as the agent's 0, which is right when the
    agent's program hangs the tests and wrong when the host is too loaded to run them in time (measured here:
    with nine trials, two trainers and other jobs on two cores, the mini pool's verifiers took 70-90 s, so a
    60 s deadline scored most trials 0).
    The line says so, so that a short ``rollout.verifier_deadline_s`` does not silently feed the trainer 0s.
    """
    if row.get("compaction_warning"):
        console.print(
            f"[yellow]warning:[/] {escape(row['compaction_warning'])}", highlight=False, soft_wrap=True
        )
    fallbacks = row.get("fallbacks")
    timeouts = fallbacks.get("verifier_timeout", 0) if isinstance(fallbacks, dict) else 0
    if timeouts:
        console.print(
            f"[yellow]warning:[/] {timeouts} of {row.get('trials_admitted', '?')} admitted trials scored 0 "
            "on a verifier timeout; if the host is loaded rather than the agent's program hung, raise "
            "rollout.verifier_deadline_s or lower rollout.concurrency",
            highlight=False,
            soft_wrap=True,
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


class RunProgress:
    """Progress bars with ETA for a run: the steps of the current phase and the trials of the current step.

    Shown only when ``console`` is an interactive terminal (not dumb); otherwise every method does nothing
    and nothing is printed, so a log piped to a file holds the trial lines and the step table only. The bars
    are transient: they stay at the bottom while the run prints above them and vanish when it ends. The ETA
    is rich's estimate from the rate of the steps (trials) completed so far.

    Use it as a context manager around the run; `phase` opens the steps bar (``critic warm-up``, ``PPO``),
    `trials` the trials bar of a step, `trial_done` advances it (pass it to
    `t1_rollout.scheduler.collect_batch` as ``on_trial_done``) and `step_done` advances the steps bar.

    Args:
        console: the run's console.
    """

    def __init__(self, console: Console) -> None:
        self.enabled = console.is_terminal and not console.is_dumb_terminal
        self._progress = Progress(
            TextColumn("{task.description:<18}"),
            BarColumn(bar_width=30),
            MofNCompleteColumn(),
            TextColumn("elapsed"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            transient=True,
            disable=not self.enabled,
        )
        self._steps: TaskID | None = None
        self._trials: TaskID | None = None

    def __enter__(self) -> RunProgress:
        self._progress.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._progress.stop()

    def phase(self, description: str, total: int) -> None:
        """Open the steps bar of a phase (``critic warm-up``, ``PPO``) of ``total`` steps, replacing any."""
        if self._steps is not None:
            self._progress.remove_task(self._steps)
        self._steps = self._progress.add_task(description, total=total)

    def step_done(self) -> None:
        """One step of the current phase is done: advance the steps bar and drop the step's trials bar."""
        if self._steps is not None:
            self._progress.advance(self._steps)
        if self._trials is not None:
            self._progress.remove_task(self._trials)
            self._trials = None

    def trials(self, label: str, total: int) -> None:
        """Open the trials bar of step ``label`` with ``total`` launched trials, replacing the last."""
        if self._trials is not None:
            self._progress.remove_task(self._trials)
        self._trials = self._progress.add_task(f"{label} trials", total=total)

    def refresh(self) -> None:
        """Redraw the bars now (they also redraw on their own, ten times a second)."""
        self._progress.refresh()

    def trial_done(self, record: Any) -> None:
        """A trial of the current step ended (its ``TrialRecord``, unused): advance the trials bar."""
        if self._trials is not None:
            self._progress.advance(self._trials)
