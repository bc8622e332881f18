"""`t1 tasks` verbs: list, stats, validate a task pool.

``POOL`` is ``builtin:mini`` (the bundled mini pool, default) or a directory of Harbor task bundles. Every
verb loads the pool with ``load_pool(..., strict=False)``: the good bundles are listed, summarised or
validated and every broken bundle (bad ``task.toml``, missing ``instruction.md``, ``tests/test.sh``,
``solution/solve.sh``, ...) is reported with its file and field, all in one run.

Exit codes: 0 success; 1 a broken bundle (every verb) or, for ``validate``, a failing task (an oracle that
does not pass every assertion, a weak verifier that a do-nothing agent satisfies, or an infrastructure
failure); 2 invalid input (unknown builtin pool, a pool path that is not a readable directory, a pool with no
bundles, bad arguments).
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
from rich.markup import escape
from rich.table import Table

from t1._errors import EXIT_CHECK_FAILED, EXIT_OK, reported
from t1_tasks import Pool, Task, TaskError, load_pool

app = typer.Typer(help="List, summarise and validate task pools (Harbor task bundles).", no_args_is_help=True)

INVALID = (TaskError,)

PoolArg = Annotated[str, typer.Argument(help="builtin:mini or a directory of task bundles")]
Limit = Annotated[int | None, typer.Option("--limit", min=1, help="only the first N tasks in stored order")]
Debug = Annotated[bool, typer.Option("--debug", help="show tracebacks instead of a one-line error")]

# Printed under `t1 tasks list`: the task.toml values in the table are not what training applies.
TASK_TOML_FOOTER = (
    "agent s, verifier s, cpus and memory MB are task.toml's values, shown for information: training applies "
    "the recipe's rollout.agent_deadline_s, rollout.verifier_deadline_s and sandbox limits to every task "
    "instead; only `t1 tasks validate` uses the task.toml timeouts, and nothing uses [environment]."
)


def _console() -> Console:
    # Piped output (CI logs, CliRunner) gets 120 columns so that task ids are not cut.
    return Console(highlight=False, width=None if sys.stdout.isatty() else 120)


def _load(pool: str, limit: int | None) -> Pool:
    """The pool with every broken bundle collected in ``Pool.broken`` (not raised at the first one)."""
    return load_pool(pool, limit=limit, strict=False)


def _print_broken(out: Console, p: Pool, what: str) -> None:
    """List the broken bundles of ``p``, one per line with the file and field at fault (no wrapping)."""
    if not p.broken:
        return
    out.print(f"[bold red]{len(p.broken)} broken bundle{'s' * (len(p.broken) != 1)} ({what}):[/]")
    for b in p.broken:
        out.print(f"  [red]{escape(b.id)}[/]: {escape(b.message)}", soft_wrap=True)


def _env_value(task: Task, key: str) -> str:
    """``task.toml``'s ``[environment].<key>`` for display (``-`` when absent)."""
    value = task.config.get("environment", {}).get(key)
    return "-" if value is None else f"{value:g}" if isinstance(value, int | float) else str(value)


@app.command("list")
def list_tasks(pool: PoolArg = "builtin:mini", limit: Limit = None, debug: Debug = False) -> None:
    """One row per task: id, category, difficulty, assertions, task.toml timeouts and resources.

    Broken bundles are listed below the table with their errors (exit 1).
    """
    code = EXIT_OK
    with reported(debug, invalid=INVALID):
        p = _load(pool, limit)
        out = _console()
        broken = f", {len(p.broken)} broken" if p.broken else ""
        table = Table(title=f"{p.source}: {len(p)} tasks{broken}", box=box.SIMPLE)
        for col in ("id", "category", "difficulty"):
            table.add_column(col, no_wrap=True)
        for col in ("assertions", "agent s", "verifier s", "cpus", "memory MB"):
            table.add_column(col, justify="right", no_wrap=True)
        for t in p.tasks:
            table.add_row(
                t.id,
                t.category,
                t.difficulty,
                str(t.n_assertions),
                f"{t.agent_timeout_s:.0f}",
                f"{t.verifier_timeout_s:.0f}",
                _env_value(t, "cpus"),
                _env_value(t, "memory_mb"),
            )
        out.print(table)
        out.print(escape(TASK_TOML_FOOTER), style="dim", soft_wrap=True)
        _print_broken(out, p, "not listed")
        if p.broken:
            code = EXIT_CHECK_FAILED
    # Outside `reported`: a typer.Exit raised inside it is reported as an error ("error: 1").
    if code:
        raise typer.Exit(code)


@app.command()
def stats(pool: PoolArg = "builtin:mini", limit: Limit = None, debug: Debug = False) -> None:
    """Category and difficulty mix, assertion-count percentiles (T1 §5.2 sets S = 20 near p90).

    Broken bundles are left out of the statistics and listed with their errors (exit 1).
    """
    code = EXIT_OK
    with reported(debug, invalid=INVALID):
        p = _load(pool, limit)
        s = p.statistics()
        out = _console()
        out.print(f"{p.source}: {s.n_tasks} tasks, {s.assertions_total} assertions")
        table = Table(box=box.SIMPLE)
        table.add_column("category")
        table.add_column("tasks", justify="right")
        for name, count in s.categories.items():
            table.add_row(name, str(count))
        out.print(table)
        out.print("difficulty: " + ", ".join(f"{k} {v}" for k, v in s.difficulties.items()))
        out.print(
            "assertions per task: " + ", ".join(f"{k} {v:g}" for k, v in s.assertion_percentiles.items())
        )
        _print_broken(out, p, "not counted")
        if p.broken:
            code = EXIT_CHECK_FAILED
    if code:
        raise typer.Exit(code)


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

    Each check runs in a fresh local sandbox (bubblewrap), with the task.toml's [agent] timeout_sec for the
    solution and [verifier] timeout_sec for the verifier. Broken bundles are reported as failures next to
    the validated tasks. Exit 0 when every bundle is valid, 1 otherwise.
    """
    code = EXIT_OK
    with reported(debug, invalid=INVALID):
        from t1_rollout.sandbox.local import LocalSandbox
        from t1_rollout.validate import TaskValidation, validate_pool

        p = _load(pool, limit)
        out = _console()
        _print_broken(out, p, "not validated")
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
        rows = {}
        for r in result.tasks:
            oracle = f"{r.oracle.passed}/{r.oracle.expected_total}" + (" (error)" if r.oracle.error else "")
            nop = f"{r.nop.passed}/{r.nop.expected_total}" + (" (error)" if r.nop.error else "")
            verdict = "[green]ok[/]" if r.ok else "[red]" + escape("; ".join(r.problems)) + "[/]"
            rows[r.task_id] = (r.task_id, oracle, nop, verdict)
        for b in p.broken:
            rows[b.id] = (b.id, "-", "-", "[red]broken bundle (not validated): " + escape(b.message) + "[/]")
        for key in sorted(rows):  # stored order: bundles are sorted by directory name
            table.add_row(*rows[key])
        out.print(table)
        bad = sorted([r.task_id for r in result.tasks if not r.ok] + [b.id for b in p.broken])
        total = len(result.tasks) + len(p.broken)
        if bad:
            out.print(f"[bold red]{len(bad)} of {total} tasks failed validation:[/] {', '.join(bad)}")
            code = EXIT_CHECK_FAILED
        else:
            out.print(f"[bold green]all {total} tasks valid[/]")
    # Outside `reported`: a typer.Exit raised inside it is reported as an error ("error: 1").
    if code:
        raise typer.Exit(code)
