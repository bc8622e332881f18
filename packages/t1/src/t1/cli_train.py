"""`t1 train`: run a recipe end to end with the backends its ``kind:`` fields name."""

from __future__ import annotations

import typer

from t1._errors import EXIT_INTERRUPTED, err_console, reported
from t1_spec import RecipeError


def register(app: typer.Typer) -> None:
    """Mount the ``train`` verb on the top-level app."""

    @app.command()
    def train(
        recipe: str = typer.Argument(..., help="Recipe YAML, e.g. recipes/tiny-cpu.yaml."),
        overrides: list[str] = typer.Argument(  # noqa: B008 - typer's declaration style
            None, help="Dotlist overrides, e.g. ppo.steps=1 rollout.max_turns=2."
        ),
        debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
    ) -> None:
        """Train a recipe: critic warm-up if enabled, then PPO steps; writes a run directory.

        Exit codes: 0 the run finished; 2 the recipe is invalid or a path in it is unusable (no run directory
        is created); 1 the run failed, or the preflight refused the recipe before any work (a part not built,
        a missing host tool, a plan the capacity model refuses); 130 interrupted by Ctrl-C, SIGTERM or SIGHUP
        (the run directory is kept, marked "interrupted" in status.json).
        """
        from t1.run.signals import stop_signals

        run = None
        try:
            # SIGTERM and SIGHUP stop the run as Ctrl-C does (trials cancelled, sandboxes reclaimed, the run
            # directory marked "interrupted"), from the first moment: the handlers go in before any import.
            with stop_signals() as token, reported(debug, invalid=(RecipeError,)):
                from t1.run import Run, RunFailed
                from t1_spec import load_recipe

                spec = load_recipe(recipe, overrides or [])
                run = Run(spec, spec.model_dump(mode="json", by_alias=True), stop=token)
                try:
                    run.run()
                except ValueError as exc:  # once the run has started, a failure is the run's (exit 1)
                    raise RunFailed(str(exc)) from exc
        except KeyboardInterrupt:
            where = run.run_dir if run is not None else None
            err_console.print(
                "[bold yellow]interrupted:[/] "
                + (
                    f"the trials in flight were cancelled and their sandboxes reclaimed; the partial run "
                    f"is in {where}"
                    if where is not None
                    else "during start-up, before any sandbox or run directory"
                ),
                highlight=False,
                soft_wrap=True,
            )
            raise SystemExit(EXIT_INTERRUPTED) from None
