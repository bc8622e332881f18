"""The ``t1`` command line: one verb per user task.

Sub-commands live in their own modules (``cli_recipe``, ``cli_plan``, ``cli_tasks``, ``cli_train``,
``cli_eval``, ``cli_plot``, ``cli_reward``) and are mounted here.

Exit codes (every verb):
    0: success (a plan fits, a recipe validates, a run finished).
    1: the check ran and failed (a plan does not fit, a pool has failing tasks).
    2: invalid input (a recipe that does not validate, a missing file, bad arguments).
    130: interrupted by Ctrl-C (``t1 train`` keeps the partial run directory, marked in ``status.json``).
"""

from __future__ import annotations

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
    cli_train,
)

app = typer.Typer(
    name="t1",
    help="T1: reinforcement learning for terminal agents on executed outcomes.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(cli_recipe.app, name="recipe")
app.add_typer(cli_plan.app, name="plan")
app.add_typer(cli_tasks.app, name="tasks")  # cli_tasks_checks adds audit and overlap to it
cli_train.register(app)
cli_eval.register(app)
cli_sft.register(app)
cli_plot.register(app)
cli_reward.register(app)


if __name__ == "__main__":  # pragma: no cover
    app()
