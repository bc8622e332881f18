"""The ``t1`` command line: one verb per user task.

Sub-commands live in their own modules (``cli_recipe``, ``cli_plan``, ``cli_tasks``, ``cli_train``,
``cli_eval``, ``cli_plot``, ``cli_reward``) and are mounted here.

Exit codes (every verb):
    0: success (a plan fits, a recipe validates and this machine can run it, a run finished).
    1: the input is valid but the check failed or the work cannot be done here (a plan does not fit, a pool
        has failing tasks, a valid recipe that t1 train's preflight refuses on this machine, a path the recipe
        names that this machine lacks, a run that failed).
    2: invalid input (a recipe that does not load or validate, a missing file or folder given as an
        argument, bad arguments).
    130: interrupted by Ctrl-C, SIGTERM or SIGHUP (``t1 train`` keeps the partial run directory, marked in
        ``status.json``).
"""

from __future__ import annotations

from importlib.metadata import version as _package_version

import typer

from t1 import (  # noqa: F401 - registers
    cli_eval,
    cli_plan,
    cli_plot,
    cli_recipe,
    cli_reward,
    cli_sft,
    cli_tasks,
    cli_tasks_checks,
    cli_tasks_synth,
    cli_train,
)

app = typer.Typer(
    rich_markup_mode=None,  # help text is plain: a [word] is printed, not read as Rich markup
    name="t1",
    help="T1: reinforcement learning for terminal agents on executed outcomes.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"t1 {_package_version('t1')}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print t1's version and exit."
    ),
) -> None:
    """T1: reinforcement learning for terminal agents on executed outcomes."""


app.add_typer(cli_recipe.app, name="recipe")
app.add_typer(cli_plan.app, name="plan")
app.add_typer(cli_tasks.app, name="tasks")  # cli_tasks_checks adds audit and overlap, cli_tasks_synth synth
cli_train.register(app)
cli_eval.register(app)
cli_sft.register(app)
cli_plot.register(app)
cli_reward.register(app)


if __name__ == "__main__":  # pragma: no cover
    app()
