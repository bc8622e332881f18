"""`t1 train`: run a recipe end to end (embedded engine, local sandboxes, torch trainer)."""

from __future__ import annotations

import signal

import typer

from t1._errors import EXIT_INTERRUPTED, err_console, reported, stop_as_ctrl_c


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
        is created); 1 the run failed (e.g. a step where no trial finished, or a part not built yet); 130
        interrupted by Ctrl-C or SIGTERM (the run directory is kept, marked "interrupted" in status.json).
        """
        from t1_spec import RecipeError, load_recipe

        with reported(debug, invalid=(RecipeError,)):
            spec = load_recipe(recipe, overrides or [])
            from t1.training import Trainer

            trainer: Trainer | None = None
            stopping = False

            def on_sigterm(signum: int, frame: object) -> None:
                if stopping:  # shutdown already under way
                    return
                if trainer is not None:
                    trainer.interrupted_by = "SIGTERM"
                    trainer.stop_requested = True
                stop_as_ctrl_c(signum, frame)

            # SIGTERM (a scheduler, `kill`) stops the run as Ctrl-C does: trials cancelled, sandboxes
            # reclaimed, the run directory marked "interrupted".
            signal.signal(signal.SIGTERM, on_sigterm)
            try:
                trainer = Trainer(spec, spec.model_dump(mode="json", by_alias=True))
                trainer.run()
            except KeyboardInterrupt:
                # A second Ctrl-C during shutdown must not print tracebacks from library atexit hooks.
                stopping = True
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                where = trainer.run_dir if trainer is not None else None
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
