"""`t1 tasks` verbs: list, stats, validate a task pool.

``POOL`` is ``builtin:mini`` (the bundled mini pool, default) or a directory of Harbor task bundles.

Exit codes: 0 success; 1 ``validate`` found a failing task (an oracle that does not pass every assertion, a
weak verifier that a do-nothing agent satisfies, or an infrastructure failure); 2 invalid input (unknown pool,
malformed bundle, bad arguments).
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from t1._errors import EXIT_CHECK_FAILED, reported
from t1_tasks import Pool, TaskError, load_pool

app = typer.Typer(help="List, summarise and validate task pools (Harbor task bundles).", no_args_is_help=True)

INVALID = (TaskError,)

PoolArg = Annotated[str, typer.Argument(help="builtin:mini or a directory of task bundles")]
Limit = Annotated[int | None, typer.Option("--limit", min=1, help="only the first N tasks in stored order")]
Debug = Annotated[bool, typer.Option("--debug", help="show tracebacks instead of a one-line error")]


def _console() -> Console:
    # Piped output (CI logs, CliRunner) gets 120 columns so that task ids are not cut.
    return Console(highlight=False, width=None if sys.stdout.isatty() else 120)


def _load(pool: str, limit: int | None) -> Pool:
    return load_pool(pool, limit=limit)


@app.command("list")
def list_tasks(pool: PoolArg = "builtin:mini", limit: Limit = None, debug: Debug = False) -> None:
    """One row per task: id, category, difficulty, assertions, agent and verifier timeouts."""
    with reported(debug, invalid=INVALID):
        p = _load(pool, limit)
        table = Table(title=f"{p.source}: {len(p)} tasks", box=box.SIMPLE)
        for col in ("id", "category", "difficulty", "assertions", "agent s", "verifier s"):
            table.add_column(col, justify="right" if col[0] in "av" else "left", no_wrap=True)
        for t in p.tasks:
            table.add_row(
                t.id,
                t.category,
                t.difficulty,
                str(t.n_assertions),
                f"{t.agent_timeout_s:.0f}",
                f"{t.verifier_timeout_s:.0f}",
            )
        _console().print(table)


@app.command()
def stats(pool: PoolArg = "builtin:mini", limit: Limit = None, debug: Debug = False) -> None:
    """Category and difficulty mix, assertion-count percentiles (T1 §5.2 sets S = 20 near p90)."""
    with reported(debug, invalid=INVALID):
        s = _load(pool, limit).statistics()
        out = _console()
        table = Table(title=f"{pool}: {s.n_tasks} tasks, {s.assertions_total} assertions", box=box.SIMPLE)
        table.add_column("category")
        table.add_column("tasks", justify="right")
        for name, count in s.categories.items():
            table.add_row(name, str(count))
        out.print(table)
        out.print("difficulty: " + ", ".join(f"{k} {v}" for k, v in s.difficulties.items()))
        out.print(
            "assertions per task: " + ", ".join(f"{k} {v:g}" for k, v in s.assertion_percentiles.items())
        )


@app.command()
def validate(
    pool: PoolArg = "builtin:mini",
    limit: Limit = None,
    concurrency: Annotated[int, typer.Option("--concurrency", "-j", min=1, help="tasks at once")] = 2,
    keep: Annotated[
        Path | None, typer.Option("--keep", help="keep verifier outputs under this directory")
    ] = None,
    debug: Debug = False,
) -> None:
    """Run every reference solution (must pass every assertion) and a do-nothing agent (must not).

    Each check runs in a fresh local sandbox (bubblewrap). Exit 0 when every task is valid, 1 otherwise.
    """
    with reported(debug, invalid=INVALID):
        from t1_rollout.sandbox.local import LocalSandbox
        from t1_rollout.validate import TaskValidation, validate_pool

        p = _load(pool, limit)
        out = _console()
        out.print(f"validating {len(p)} tasks of {p.source} in local sandboxes, {concurrency} at a time")

        def progress(r: TaskValidation) -> None:
            mark = "[green]ok[/]" if r.ok else "[red]FAIL[/]"
            out.print(f"  {mark} {r.task_id} ({r.oracle.duration_s + r.nop.duration_s:.1f} s)")

        started = time.monotonic()
        result = asyncio.run(
            validate_pool(
                p, sandbox_factory=LocalSandbox, concurrency=concurrency, work_dir=keep, on_task_done=progress
            )
        )
        table = Table(
            title=f"{p.source}: validation ({time.monotonic() - started:.1f} s wall)", box=box.SIMPLE
        )
        for col in ("task", "oracle", "do-nothing", "verdict"):
            table.add_column(col, no_wrap=col != "verdict", overflow="fold")
        for r in result.tasks:
            oracle = f"{r.oracle.passed}/{r.oracle.expected_total}" + (" (error)" if r.oracle.error else "")
            nop = f"{r.nop.passed}/{r.nop.expected_total}" + (" (error)" if r.nop.error else "")
            verdict = "[green]ok[/]" if r.ok else "[red]" + "; ".join(r.problems) + "[/]"
            table.add_row(r.task_id, oracle, nop, verdict)
        out.print(table)
        bad = [r.task_id for r in result.tasks if not r.ok]
        if bad:
            out.print(
                f"[bold red]{len(bad)} of {len(result.tasks)} tasks failed validation:[/] {', '.join(bad)}"
            )
            raise typer.Exit(EXIT_CHECK_FAILED)
        out.print(f"[bold green]all {len(result.tasks)} tasks valid[/]")
