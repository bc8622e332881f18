"""`t1 plot`: draw a run directory's figures as PNGs (reward, EV, log-prob gap, turns and tokens, ...).

The figures are those of `t1.plots.FIGURES`, drawn from ``metrics.jsonl`` and ``trajectories/``; a figure
whose metrics the run did not log is skipped with a note. Given two or more run directories it draws their
reward curves on shared axes instead (`t1.plots.plot_compare`).

Exit codes: 0 at least one figure was written; 1 none could be drawn (no PPO row carries any plotted metric);
2 invalid input (not a directory, no ``metrics.jsonl``, an empty one, a malformed line: the message names
the line).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from t1._errors import EXIT_CHECK_FAILED, err_console, reported
from t1.run.console import run_console


def register(app: typer.Typer) -> None:
    """Mount the ``plot`` verb on the top-level app."""

    @app.command("plot")
    def plot(
        run_dirs: Annotated[
            list[Path],
            typer.Argument(
                help="A run directory of t1 train (holds metrics.jsonl); two or more draw their reward "
                "curves side by side (compare_reward.png).",
                metavar="RUN_DIR...",
            ),
        ],
        out: Annotated[
            Path | None,
            typer.Option(
                "--out", help="Folder for the PNGs (default RUN_DIR/plots; required with two runs)."
            ),
        ] = None,
        label: Annotated[
            list[str] | None,
            typer.Option("--label", help="A name per run directory, in order, for the comparison's legend."),
        ] = None,
        dpi: Annotated[int, typer.Option("--dpi", min=20, max=600, help="PNG resolution.")] = 80,
        debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
    ) -> None:
        """Draw a run's figures from metrics.jsonl, one PNG per concern; or compare several runs' rewards.

        One run: reward and passed assertions, critic EV, the log-prob gap, turns and tokens per trajectory,
        retention by family, fallbacks and failures by stage. Two or more: their reward and passed-assertion
        curves on shared axes (compare_reward.png in --out). Exit 0 at least one figure written, 1 none could
        be drawn, 2 not a run directory or a malformed metrics.jsonl (the line is named).
        """
        with reported(debug):
            from t1.plots import plot_compare, plot_run

            if len(run_dirs) == 1 and not label:
                report = plot_run(run_dirs[0], out, dpi=dpi)
            else:
                names = list(label) if label else [p.name for p in run_dirs]
                if len(names) != len(run_dirs):
                    raise ValueError(
                        f"{len(names)} --label for {len(run_dirs)} run directories: give one per run"
                    )
                if len(run_dirs) < 2:
                    raise ValueError("--label names runs to compare: give two or more run directories")
                if out is None:
                    raise ValueError("comparing runs needs --out DIR (no one run owns the figure)")
                report = plot_compare(list(zip(names, run_dirs, strict=True)), out, dpi=dpi)
        console = run_console()
        for path in report.written:
            console.print(f"wrote {escape(str(path))}", highlight=False, soft_wrap=True)
        for note in report.notes:
            console.print(f"  [yellow]note[/] {escape(note)}", highlight=False, soft_wrap=True)
        if not report.written:
            err_console.print("[bold red]error:[/] no figure could be drawn from this run", highlight=False)
            raise typer.Exit(EXIT_CHECK_FAILED)
