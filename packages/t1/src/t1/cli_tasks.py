"""`t1 tasks` verbs: list, stats, validate a task pool (audit and overlap are in `t1.cli_tasks_checks`).

``POOL`` is ``builtin:mini`` (the bundled mini pool, default) or a directory of Harbor task bundles. Every
verb loads the pool with ``load_pool(..., strict=False)``: the good bundles are listed, summarised or
validated and every broken bundle (bad ``task.toml``, missing ``instruction.md``, ``tests/test.sh``, ...)
is reported with its file and field, all in one run. ``solution/`` is optional, as in Harbor.

Exit codes: 0 success; 1 a broken bundle (every verb) or, for ``validate``, a failing task (an oracle that
does not pass every assertion, a weak verifier that a do-nothing agent satisfies, an infrastructure
failure), a task without ``solution/`` (not proven solvable) or a host that cannot run the local sandbox
(no ``bwrap``, not root: said once, up front); 2 invalid input (unknown builtin pool, a pool path that is
not a readable directory, a pool with no bundles, a ``--keep`` that is not a directory, bad arguments);
130 ``validate`` interrupted by Ctrl-C (the checks in flight are cancelled and their sandboxes reclaimed
first).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from t1._errors import (
    EXIT_CHECK_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    check_output_file,
    err_console,
    reported,
)
from t1.run.signals import run_interruptible, stop_signals
from t1_spec import RecipeError
from t1_tasks import Pool, Task, TaskError, format_seconds, load_pool

if TYPE_CHECKING:  # t1_rollout is imported only by `validate`, so that `list` and `stats` start fast
    from collections.abc import Callable

    from t1_rollout.validate import CheckResult, SandboxLedger, TaskValidation
    from t1_sandbox.base import Sandbox

app = typer.Typer(
    rich_markup_mode=None,  # help text is plain: a [word] is printed, not read as Rich markup
    help="List, summarise, validate, audit and compare task pools (Harbor task bundles).",
    no_args_is_help=True,
)

INVALID = (TaskError, RecipeError)

PoolArg = Annotated[str, typer.Argument(help="builtin:mini or a directory of task bundles")]
Limit = Annotated[int | None, typer.Option("--limit", min=1, help="only the first N tasks in stored order")]
Debug = Annotated[bool, typer.Option("--debug", help="show tracebacks instead of a one-line error")]

# Printed under `t1 tasks list`: the task.toml values in the table are not what training applies.
TASK_TOML_FOOTER = (
    "agent s, verifier s, cpus and memory MB are task.toml's values, shown for information: training applies "
    "the recipe's rollout.agent_deadline_s, rollout.verifier_deadline_s and sandbox limits to every task "
    "instead; only `t1 tasks validate` uses the task.toml timeouts, and nothing uses [environment]."
)
# Printed under `t1 tasks list` when some task's assertion count is not known statically.
UNKNOWN_COUNT_FOOTER = (
    "assertions ?: not known without running pytest (parametrize over a non-literal, fixture params, "
    "pytest_generate_tests, ...); `t1 tasks validate` takes the count from the verifier's report."
)


def table_console() -> Console:
    """The console the ``t1 tasks`` verbs print tables on: the terminal's width, or 120 columns when piped.

    Piped output (CI logs, ``CliRunner``) gets 120 columns so that task ids are not cut.
    """
    return Console(highlight=False, width=None if sys.stdout.isatty() else 120)


def load_lenient(pool: str, limit: int | None) -> Pool:
    """The pool with every broken bundle collected in ``Pool.broken`` (not raised at the first one).

    Harbor's rules, for every verb: ``solution/`` is optional (``validate`` runs the do-nothing check alone
    for a bundle without one).

    Args:
        pool: ``builtin:mini`` or a directory of task bundles.
        limit: only the first ``limit`` tasks in stored order (``None``: all).

    Raises:
        TaskError: unknown builtin pool, an unreadable directory or a directory with no bundles.
        FileNotFoundError: ``pool`` is not a directory.
    """
    return load_pool(pool, limit=limit, strict=False)


def print_broken(out: Console, p: Pool, what: str) -> None:
    """List the broken bundles of ``p``, one per line with the file and field at fault (no wrapping)."""
    if not p.broken:
        return
    out.print(f"[bold red]{len(p.broken)} broken bundle{'s' * (len(p.broken) != 1)} ({what}):[/]")
    for b in p.broken:
        out.print(f"  [red]{escape(b.id)}[/]: {escape(b.message)}", soft_wrap=True)


def print_ignored_keys(out: Console, p: Pool) -> None:
    """List the ``task.toml`` keys Harbor's task model does not have (ignored, as Harbor ignores them)."""
    lines = [w for t in p.tasks for w in t.warnings]
    if not lines:
        return
    keys = f"{len(lines)} task.toml key{'s' * (len(lines) != 1)}"
    out.print(f"[yellow]{keys} ignored, as Harbor ignores them:[/]")
    for line in lines:
        out.print(f"  {escape(line)}", soft_wrap=True, style="dim")


def _env_value(task: Task, key: str) -> str:
    """``task.toml``'s ``[environment].<key>`` for display (``-`` when absent)."""
    value = task.config.get("environment", {}).get(key)
    return "-" if value is None else f"{value:g}" if isinstance(value, int | float) else str(value)


def _count(n: int | None) -> str:
    """An assertion count for display: ``?`` when it is not known statically."""
    return "?" if n is None else str(n)


def _keep_dir(keep: Path | None) -> Path | None:
    """``--keep`` as a directory (created if missing).

    Raises:
        ValueError: it is a file, or a directory cannot be created there (exit 2, naming --keep).
    """
    if keep is None:
        return None
    if keep.exists() and not keep.is_dir():
        raise ValueError(f"--keep {keep}: is a file, not a directory; give a directory (created if missing)")
    try:
        keep.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"--keep {keep}: cannot create the directory: {exc.strerror or exc}") from exc
    return keep


def _sandbox_host_problems() -> list[str]:
    """What this machine lacks to run local sandboxes (bubblewrap, root), one line each; empty when ready."""
    from t1_sandbox import local_sandbox_problems

    return local_sandbox_problems()


@app.command("list")
def list_tasks(pool: PoolArg = "builtin:mini", limit: Limit = None, debug: Debug = False) -> None:
    """One row per task: id, category, difficulty, assertions, task.toml timeouts and resources.

    Broken bundles are listed below the table with their errors (exit 1).
    """
    code = EXIT_OK
    with reported(debug, invalid=INVALID):
        p = load_lenient(pool, limit)
        out = table_console()
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
                _count(t.n_assertions),
                format_seconds(t.agent_timeout_s),
                format_seconds(t.verifier_timeout_s),
                _env_value(t, "cpus"),
                _env_value(t, "memory_mb"),
            )
        out.print(table)
        out.print(escape(TASK_TOML_FOOTER), style="dim", soft_wrap=True)
        if any(t.n_assertions is None for t in p.tasks):
            out.print(escape(UNKNOWN_COUNT_FOOTER), style="dim", soft_wrap=True)
        print_broken(out, p, "not listed")
        print_ignored_keys(out, p)
        if p.broken:
            code = EXIT_CHECK_FAILED
    # Outside `reported`: a typer.Exit raised inside it is reported as an error ("error: 1").
    if code:
        raise typer.Exit(code)


@app.command()
def stats(
    pool: PoolArg = "builtin:mini",
    validated: Annotated[
        Path | None,
        typer.Option("--validated", help="a validation record (t1 tasks validate --record): observed counts"),
    ] = None,
    recipe: Annotated[
        Path | None, typer.Option("--recipe", help="show this recipe's reward.scale beside the suggested S")
    ] = None,
    png: Annotated[
        Path | None, typer.Option("--png", help="write a histogram of assertion counts (PNG)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object instead")] = False,
    limit: Limit = None,
    debug: Debug = False,
) -> None:
    """Category and difficulty mix, assertion counts (median, p90, max) and the suggested S = ceil(p90).

    T1 §5.2 sets S = 20 near the p90 of T1-15k. Counts are static (from tests/*.py) and, with --validated,
    those the verifier reported for the reference solution, which the statistics then prefer; the record
    also gives the runtimes and how many tasks emit a per-assertion report. Broken bundles are left out of
    the statistics and listed with their errors (exit 1). A --png that is a directory, or whose directory
    does not exist, is refused before any work (exit 2).
    """
    code = EXIT_OK
    with reported(debug, invalid=INVALID):
        from t1._stats_view import print_report
        from t1_tasks import pool_report, read_record, record_for
        from t1_tasks.stats import plot_histogram

        if png is not None:
            check_output_file(png, "--png", "assertions.png")
        p = load_lenient(pool, limit)
        ids = [t.id for t in p.tasks]
        record = record_for(read_record(validated), p.source, ids) if validated is not None else None
        recipe_scale, recipe_note = _recipe_scale(recipe)
        r = pool_report(p, record, recipe_scale=recipe_scale)
        if png is not None:
            known = [c for c in r.counts.values() if c is not None]
            if not known or r.summary is None or r.suggested_scale is None:
                raise ValueError(f"--png {png}: no task of {p.source} has a known assertion count to plot")
            try:
                plot_histogram(
                    known,
                    png,
                    title=f"{p.source}: assertions per task ({len(known)} tasks)",
                    p90=r.summary.p90,
                    scale=r.suggested_scale,
                    recipe_scale=recipe_scale,
                )
            except OSError as exc:
                raise ValueError(f"--png {png}: cannot write it: {exc.strerror or exc}") from exc
        if as_json:
            obj = r.as_json() | {"broken": [{"id": b.id, "error": b.message} for b in p.broken]}
            typer.echo(json.dumps(obj, indent=2))
        else:
            s = p.statistics()
            out = table_console()
            unknown = (
                f" (and {s.assertions_unknown} tasks whose count is known only when run: parametrized over a "
                "non-literal, fixture params, ...)"
                if s.assertions_unknown
                else ""
            )
            out.print(
                f"{p.source}: {s.n_tasks} tasks, {s.assertions_total} assertions{unknown}", soft_wrap=True
            )
            table = Table(box=box.SIMPLE)
            table.add_column("category")
            table.add_column("tasks", justify="right")
            table.add_column("share", justify="right")
            for name, count in s.categories.items():
                table.add_row(name, str(count), f"{count / s.n_tasks:.0%}")
            out.print(table)
            out.print("difficulty: " + ", ".join(f"{k} {v}" for k, v in s.difficulties.items()))
            out.print(
                "assertions per task (static): "
                + ", ".join(f"{k} {v:g}" for k, v in s.assertion_percentiles.items())
            )
            print_report(
                out,
                r,
                record=validated,
                record_pool=record.pool if record else None,
                recipe=recipe,
                recipe_note=recipe_note,
            )
            if png is not None:
                out.print(f"histogram written to {escape(str(png))}", soft_wrap=True)
            print_broken(out, p, "not counted")
            print_ignored_keys(out, p)
        if p.broken:
            code = EXIT_CHECK_FAILED
    if code:
        raise typer.Exit(code)


def _recipe_scale(recipe: Path | None) -> tuple[int | None, str | None]:
    """``--recipe``'s ``reward.scale`` and, for a reward without one (ratio, binary), a note saying so.

    Raises:
        RecipeError: the recipe does not load or validate (exit 2).
    """
    if recipe is None:
        return None, None
    from t1_spec import load_recipe

    reward = load_recipe(recipe).reward
    scale = getattr(reward, "scale", None)
    return (scale, None) if scale is not None else (None, f"reward.kind {reward.kind} has no scale S")


@app.command()
def validate(
    pool: PoolArg = "builtin:mini",
    limit: Limit = None,
    concurrency: Annotated[int, typer.Option("--concurrency", "-j", min=1, help="tasks at once")] = 2,
    keep: Annotated[
        Path | None, typer.Option("--keep", help="keep verifier outputs under this directory")
    ] = None,
    record: Annotated[
        Path | None, typer.Option("--record", help="write the validation record (JSON) to this file")
    ] = None,
    recipe: Annotated[
        Path | None,
        typer.Option("--recipe", help="run the checks on this recipe's sandbox backend (sandbox section)"),
    ] = None,
    debug: Debug = False,
) -> None:
    """Run every reference solution (must pass every assertion) and a do-nothing agent (must not).

    Each check runs in a fresh sandbox: a local one (bubblewrap, as root) by default, or one of `--recipe`'s
    `sandbox` section (`sandbox.kind: docker` builds each task's Dockerfile; its `network`, `build_network`
    and `images` apply), with the task.toml's [agent] timeout_sec for the solution and [verifier] timeout_sec
    for the verifier. Validate on the backend (and network policy) that training will use: the record then
    tells failure attribution whether the task's verifier writes its report there. Broken bundles are reported
    as failures next to the validated tasks. A bundle without `solution/` (Harbor allows one) gets the
    do-nothing check alone: its oracle column says `not run (no solution/)` and its verdict `unproven` (not
    proven solvable; exit 1, listed apart from the failures). A task whose assertion count is not known
    statically (shown as `?` by `list`) is checked against the count its verifier reports. Exit 0 when every
    bundle is valid, 1 otherwise (or when this machine cannot run the sandboxes, said once up front), 2 for a
    bad recipe or a `--keep` that is not a directory, 130 on Ctrl-C (after the sandboxes in flight are
    reclaimed). A failed check's verdict cell holds its cause (a build's failing step, exit code and last
    lines); `--record FILE` writes what was observed in full (per task: verdict, oracle and do-nothing counts,
    report format, solve and verifier times, failure causes with whole build logs, the network policy; format
    in `t1_tasks.validation`), read by `t1 tasks stats --validated FILE` and by failure attribution.
    """
    code = EXIT_OK
    with reported(debug, invalid=INVALID):
        from t1_rollout.validate import SandboxLedger, validate_pool, validation_record

        keep = _keep_dir(keep)
        if record is not None and record.is_dir():
            raise ValueError(f"--record {record}: is a directory; give the path of the JSON file to write")
        p = load_lenient(pool, limit)
        factory, where = _validation_sandboxes(recipe, needed=bool(p.tasks))
        out = table_console()
        print_broken(out, p, "not validated")
        print_ignored_keys(out, p)
        broken = f" ({len(p.broken)} broken bundles above are not run)" if p.broken else ""
        out.print(f"validating {_tasks(len(p))} of {p.source} in {where}, {concurrency} at a time{broken}")
        done: list[TaskValidation] = []

        def progress(r: TaskValidation) -> None:
            done.append(r)
            mark = {"ok": "[green]ok[/]", "unproven": "[yellow]unproven[/]"}.get(r.verdict, "[red]FAIL[/]")
            wall = r.nop.duration_s + (r.oracle.duration_s if r.oracle is not None else 0.0)
            out.print(f"  {mark} {r.task_id} ({wall:.1f} s)")

        started = time.monotonic()
        ledger = SandboxLedger()
        try:
            # SIGTERM and SIGHUP (a scheduler, `kill`) stop as Ctrl-C does, so every sandbox is reclaimed
            with stop_signals():
                result = run_interruptible(
                    validate_pool(
                        p,
                        sandbox_factory=factory,
                        concurrency=concurrency,
                        work_dir=keep,
                        on_task_done=progress,
                        ledger=ledger,
                    )
                )
        except KeyboardInterrupt:
            # asyncio.run cancelled every check and awaited it: each sandbox's close has run (or failed).
            _report_interrupt(len(done), len(p), ledger)
            raise SystemExit(EXIT_INTERRUPTED) from None
        table = Table(
            title=f"{p.source}: validation ({time.monotonic() - started:.1f} s wall)", box=box.SIMPLE
        )
        for col in ("task", "oracle", "do-nothing", "verdict"):
            table.add_column(col, no_wrap=col != "verdict", overflow="fold")
        rows = {}
        for r in result.tasks:
            rows[r.task_id] = (r.task_id, _score(r.oracle), _score(r.nop), _verdict_cell(r))
        for b in p.broken:
            rows[b.id] = (b.id, "-", "-", "[red]broken bundle (not validated): " + escape(b.message) + "[/]")
        for key in sorted(rows):  # stored order: bundles are sorted by directory name
            table.add_row(*rows[key])
        out.print(table)
        if record is not None:
            from t1_tasks import write_record

            written = write_record(validation_record(result, p, t1_version=_t1_version()), record)
            out.print(f"validation record written to {escape(str(written))}", soft_wrap=True)
        bad = sorted([r.task_id for r in result.tasks if r.verdict == "failed"] + [b.id for b in p.broken])
        unproven = sorted(r.task_id for r in result.tasks if r.verdict == "unproven")
        total = len(result.tasks) + len(p.broken)
        if bad:
            out.print(f"[bold red]{len(bad)} of {_tasks(total)} failed validation:[/] {', '.join(bad)}")
        if unproven:
            out.print(
                f"[bold yellow]{len(unproven)} of {_tasks(total)} not proven solvable (no solution/; "
                f"do-nothing check only):[/] {', '.join(unproven)}",
                soft_wrap=True,
            )
        if bad or unproven:
            code = EXIT_CHECK_FAILED
        else:
            out.print(f"[bold green]{'the 1 task is valid' if total == 1 else f'all {total} tasks valid'}[/]")
    # Outside `reported`: a typer.Exit raised inside it is reported as an error ("error: 1").
    if code:
        raise typer.Exit(code)


def _tasks(n: int) -> str:
    return f"{n} task" if n == 1 else f"{n} tasks"


def _validation_sandboxes(recipe: Path | None, *, needed: bool) -> tuple[Callable[[], Sandbox], str]:
    """The sandbox factory of ``validate`` and how to name it: the recipe's backend, else local sandboxes.

    Raises:
        RecipeError: the recipe does not load or validate (exit 2).
        SandboxError: this machine cannot run the backend (``needed``: there are tasks to run), said once.
    """
    from t1_sandbox.base import SandboxError

    if recipe is None:
        from t1_sandbox.local import LocalSandbox

        if needed and (problems := _sandbox_host_problems()):
            raise SandboxError(
                "cannot validate in local sandboxes: " + "; ".join(problems) + "; or validate on another "
                "backend with `t1 tasks validate --recipe RECIPE` (its sandbox section, e.g. "
                "recipes/tiny-docker.yaml)"
            )
        return LocalSandbox, "local sandboxes"
    from t1.run.build import sandbox_factory
    from t1_sandbox import SANDBOXES
    from t1_spec import load_recipe

    r = load_recipe(recipe)
    kind = r.sandbox.kind
    if needed and (problems := SANDBOXES.load(kind).preflight(r)):
        raise SandboxError(f"cannot validate in {kind} sandboxes of {recipe}: " + "; ".join(problems))
    network = getattr(r.sandbox, "network", None)
    policy = "" if network is None else (", network on" if network else ", no network")
    if getattr(r.sandbox, "build_network", False):
        policy += ", images built with network"
    return sandbox_factory(r), f"{kind} sandboxes ({recipe}{policy})"


def _t1_version() -> str:
    """The installed ``t1`` distribution's version (``unknown`` when it is not installed as one)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("t1")
    except PackageNotFoundError:
        return "unknown"


def _verdict_cell(r: TaskValidation) -> str:
    """The verdict column: ``ok``, ``unproven`` or each problem cut to its cause (`short_cause`).

    A failed build's error carries the whole build log: the cell keeps its first line (step, exit code)
    and last lines; ``--record`` and ``--keep`` keep all of it.
    """
    from t1_rollout.validate import short_cause

    if r.verdict == "ok":
        return "[green]ok[/]"
    if r.verdict == "unproven":
        return "[yellow]unproven: no solution/, so not proven solvable; do-nothing fails as it should[/]"
    return "[red]" + escape("; ".join(short_cause(p) for p in r.problems)) + "[/]"


def _score(check: CheckResult | None) -> str:
    """``passed/expected`` (``passed/reported`` when the count is not known statically), then ``(error)``.

    `NO_SOLUTION` for the oracle of a bundle without ``solution/``.
    """
    if check is None:
        from t1_rollout.validate import NO_SOLUTION

        return NO_SOLUTION
    total = check.expected_total if check.expected_total is not None else check.total
    return f"{check.passed}/{total}" + (" (error)" if check.error else "")


def _report_interrupt(n_done: int, n_tasks: int, ledger: SandboxLedger) -> None:
    """One stderr line after Ctrl-C: how far validation got and whether every sandbox was reclaimed."""
    if ledger.open_now == 0:
        sandboxes = f"all {ledger.opened} sandboxes it started were reclaimed"
    else:
        sandboxes = (
            f"{ledger.open_now} of {ledger.opened} sandboxes could not be confirmed reclaimed "
            "(look for leftover t1-sbx-* directories in the temp directory)"
        )
    err_console.print(
        f"[bold yellow]interrupted:[/] validation stopped after {n_done} of {n_tasks} tasks; "
        f"the checks in flight were cancelled and {sandboxes}",
        highlight=False,
        soft_wrap=True,
    )
