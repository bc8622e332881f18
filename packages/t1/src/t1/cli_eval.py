"""`t1 eval`: run a policy on every task of a pool with the recipe's evaluation settings (T1 §6).

``--policy model`` (default) samples the recipe's model, seeded random weights or the actor weights a run
saved (``--checkpoint``), through the engine and the agent harness; ``oracle`` replays every reference
solution (the ceiling of the pool) and ``do-nothing`` runs the verifier on the untouched environment (its
floor). Nothing is trained. The figures are those of `t1_rollout.eval_metrics.summarize`.

Exit codes: 0 evaluated; 1 no trial finished (every one failed for an infrastructure reason, causes shown),
or the sandbox or engine cannot run here; 2 invalid input (a recipe that does not validate, an unknown pool,
a checkpoint that is missing or does not fit the recipe's model); 130 interrupted by Ctrl-C (the sandboxes
in flight are reclaimed first).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from t1._errors import EXIT_CHECK_FAILED, EXIT_INTERRUPTED, err_console, reported
from t1.run import console as out
from t1.run.signals import run_interruptible, stop_signals
from t1_spec import Recipe, RecipeError
from t1_tasks import TaskError

if TYPE_CHECKING:
    from t1_rollout.evaluate import EvalReport, Policy


def register(app: typer.Typer) -> None:
    """Mount the ``eval`` verb on the top-level app."""

    @app.command("eval")
    def eval_(
        pool: Annotated[str, typer.Argument(help="builtin:mini or a directory of task bundles")],
        recipe: Annotated[str, typer.Option("--recipe", help="Recipe YAML, e.g. recipes/tiny-cpu.yaml.")],
        overrides: Annotated[
            list[str] | None,
            typer.Argument(help="Dotlist overrides, e.g. evaluation.attempts=1 evaluation.max_turns=2."),
        ] = None,
        checkpoint: Annotated[
            Path | None,
            typer.Option(
                "--checkpoint", help="run directory (weights/actor.safetensors) or .safetensors file"
            ),
        ] = None,
        policy: Annotated[str, typer.Option("--policy", help="model | oracle | do-nothing")] = "model",
        as_json: Annotated[bool, typer.Option("--json", help="print one JSON object instead")] = False,
        png: Annotated[
            Path | None, typer.Option("--png", help="draw resolved rate and reward per category")
        ] = None,
        debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
    ) -> None:
        """Evaluate a policy on a pool: resolved rate, mean reward, pass@k, turns and tokens (T1 §6).

        Every task is attempted evaluation.attempts times with the recipe's evaluation settings (turns,
        walls, context, temperature/top-p/top-k); --policy oracle replays each reference solution (a task
        without solution/ is skipped: a failed trial, cause "no solution", never a 0) and --policy
        do-nothing runs the verifier on the untouched environment. pool.limit, or pool.tasks (a
        split), cuts POOL too. Failed trials (infrastructure) are counted apart with their causes. Exit 0
        evaluated, 1 no trial finished or the sandbox cannot run here, 2 invalid input, 130 interrupted.
        """
        from t1_rollout.evaluate import POLICIES
        from t1_spec import load_recipe

        # a checkpoint that does not fit the model is a CheckpointMismatchError, a ValueError: exit 2
        with reported(debug, invalid=(RecipeError, TaskError)):
            if policy not in POLICIES:
                raise ValueError(f"--policy {policy!r}: choose one of {', '.join(POLICIES)}")
            if checkpoint is not None and policy != "model":
                raise ValueError(f"--checkpoint is for --policy model; --policy {policy} samples no model")
            spec = load_recipe(recipe, overrides or [])
            try:
                with stop_signals():
                    report = _evaluate(spec, pool, policy, checkpoint, quiet=as_json)
            except KeyboardInterrupt:
                err_console.print("[bold yellow]interrupted:[/] the sandboxes in flight were reclaimed")
                raise SystemExit(EXIT_INTERRUPTED) from None
            data = report.to_json()
            if checkpoint is not None:
                data["checkpoint"] = str(checkpoint)
            if as_json:
                sys.stdout.write(json.dumps(data) + "\n")
            else:
                _print_table(_console(), data)
            if png is not None:
                draw_png(data, png)
            if data["trials"] == 0:
                causes = "; ".join(f"{n} x {c}" for c, n in list(data["failed_causes"].items())[:3])
                err_console.print(f"[bold red]error:[/] no trial finished ({causes})", soft_wrap=True)
                raise SystemExit(EXIT_CHECK_FAILED)


def _console() -> Console:
    return Console(highlight=False, width=None if sys.stdout.isatty() else 140)


def _host_problems(recipe: Recipe, policy: str) -> list[str]:
    """What stops ``policy`` from running here: the sandbox (and, for the model, engine) backends."""
    from t1.run.preflight import backend_kinds, evaluation_problems, registries

    kinds = backend_kinds(recipe)
    wanted = {"sandbox.kind"} | ({"engine.kind"} if policy == "model" else set())
    problems = []
    for field, registry in registries():
        if field not in wanted:
            continue
        missing = registry.problem(kinds[field])
        problems += [missing] if missing else registry.preflight(kinds[field], recipe)
    if policy == "model":
        problems += [p for p in evaluation_problems(recipe) if p.startswith("evaluation.thinking")]
    return problems


def _evaluate(
    recipe: Recipe, source: str, policy: str, checkpoint: Path | None, *, quiet: bool
) -> EvalReport:
    """Build what ``policy`` needs through the registries and run it on the pool."""
    from t1.run.build import build_engine, sandbox_factory
    from t1_rollout.evaluate import CheckPolicy, EvalSettings, ModelPolicy, evaluate_pool
    from t1_sandbox.base import SandboxError
    from t1_tasks import load_pool

    pool = load_pool(source, limit=recipe.pool.limit)
    if recipe.pool.tasks is not None:
        from t1.run.pools import select_tasks

        try:  # the recipe's split cuts POOL, as limit does
            pool = select_tasks("pool", pool, recipe.pool.tasks)
        except ValueError as exc:
            raise ValueError(f"{exc} (override pool.tasks=null to evaluate all of POOL)") from exc
    problems = _host_problems(recipe, policy)
    if problems:
        raise SandboxError(f"t1 eval --policy {policy} cannot run here: " + "; ".join(problems))
    settings = EvalSettings.from_recipe(recipe)
    shown = err_console if quiet else _console()
    what: Policy
    if policy == "model":
        if checkpoint is None and recipe.model.init != "random":
            raise ValueError(
                f"model.init '{recipe.model.init}': give the weights to evaluate with --checkpoint"
            )
        from t1_tito import ChatTemplate, TitoSession, load_tokenizer

        _, engine = build_engine(recipe, checkpoint)
        tito = TitoSession(load_tokenizer(recipe.model.tokenizer), ChatTemplate(), thinking=settings.thinking)
        what = ModelPolicy(engine, tito, settings, sandbox_factory(recipe), recipe.reward, seed=recipe.seed)
        for note in settings.notes:
            shown.print(f"[dim]note {note}[/]", soft_wrap=True)
    else:
        what = CheckPolicy(policy, sandbox_factory(recipe), recipe.reward)  # type: ignore[arg-type]
    weights = (
        f", weights {checkpoint}" if checkpoint else (", seeded random weights" if policy == "model" else "")
    )
    shown.print(
        f"[bold]t1 eval[/] {pool.source}: {len(pool)} tasks x {settings.attempts} attempts, policy {policy}"
        f"{weights}, {settings.concurrency} at a time"
    )

    def progress(t: Any) -> None:
        mark = (
            ("[green]resolved[/]" if t.resolved else "unresolved")
            if t.status == "finished"
            else "[red]failed[/]"
        )
        reward = out.fmt(t.reward)
        cause = f"  [red]{escape(t.cause)}[/]" if t.cause else ""
        shown.print(
            f"  {t.task_id:<24} attempt {t.attempt + 1} {mark:<10} reward {reward} turns {t.turns}{cause}",
            soft_wrap=True,
        )

    try:
        return run_interruptible(
            evaluate_pool(
                pool,
                what,
                attempts=settings.attempts,
                concurrency=settings.concurrency,
                total_timeout_s=settings.total_timeout_s,
                notes=settings.notes if policy == "model" else (),
                on_trial=progress,
            )
        )
    finally:
        # the embedded engine decodes on its own thread: stopped before exit, so an interrupt cannot find it
        # inside a forward at interpreter shutdown (which aborts the process)
        if policy == "model":
            close = getattr(engine, "close", None)
            if close is not None:
                close()


def _row(table: Table, name: str, g: dict[str, Any], ks: list[int]) -> None:
    table.add_row(
        name,
        str(g["tasks"]),
        str(g["trials"]),
        str(g["failed"]),
        out.fmt(g["resolved_rate"]),
        out.fmt(g["mean_reward"]),
        *(out.fmt(g["pass_at_k"][k]) for k in ks),
        out.fmt(g["turns_mean"]),
        out.fmt(g["tokens_mean"]),
    )


def _print_table(console: Console, data: dict[str, Any]) -> None:
    """The figures as one table: overall, then per category, then per difficulty; failures below it."""
    ks = list(range(1, data["attempts"] + 1))
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("group", "tasks", "trials", "failed", "resolved", "reward", *(f"pass@{k}" for k in ks)):
        table.add_column(col, justify="left" if col == "group" else "right")
    table.add_column("turns", justify="right")
    table.add_column("tokens", justify="right")
    _row(table, "overall", data, ks)
    for key, label in (("per_category", "category"), ("per_difficulty", "difficulty")):
        table.add_section()
        for name, g in data[key].items():
            _row(table, f"{label} {name}", g, ks)
    console.print(table)
    for cause, n in data["failed_causes"].items():
        console.print(f"failed {n} x {escape(cause)}", soft_wrap=True)
    console.print(f"{data['policy']} on {data['pool']}: {data['wall_s']:.1f} s")


def draw_png(data: dict[str, Any], path: Path) -> Path:
    """Draw the resolved rate and the mean reward per category as grouped bars (matplotlib, Agg).

    Args:
        data: the JSON object of ``t1 eval --json``.
        path: the PNG to write (its folder is created).

    Returns:
        ``path``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = data["per_category"]
    # a category where no trial finished has no rate: it is left out, never drawn as a 0 bar
    names = [n for n in groups if groups[n]["resolved_rate"] is not None]
    xs = range(len(names))
    resolved = [groups[n]["resolved_rate"] for n in names]
    reward = [groups[n]["mean_reward"] or 0.0 for n in names]
    fig, ax = plt.subplots(figsize=(7.0, 3.2), dpi=100)
    ax.bar([x - 0.2 for x in xs], resolved, width=0.4, label="resolved rate")
    ax.bar([x + 0.2 for x in xs], reward, width=0.4, label="mean reward")
    ax.set_xticks(list(xs), names, rotation=20, ha="right", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_title(
        f"t1 eval {data['pool']}, policy {data['policy']}: resolved {out.fmt(data['resolved_rate'])}, "
        f"reward {out.fmt(data['mean_reward'])}, {data['trials']} finished, {data['failed']} failed",
        fontsize=9,
    )
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
