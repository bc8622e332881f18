"""`t1 train`: run a recipe end to end with the backends its ``kind:`` fields name."""

from __future__ import annotations

import typer
from rich.markup import escape

from t1._errors import EXIT_CHECK_FAILED, EXIT_INTERRUPTED, err_console, reported
from t1_spec import RecipeError


def register(app: typer.Typer) -> None:
    """Mount the ``train`` verb on the top-level app."""

    @app.command()
    def train(
        recipe: str = typer.Argument(
            None, help="Recipe YAML, e.g. recipes/tiny-cpu.yaml (none with --resume)."
        ),
        overrides: list[str] = typer.Argument(  # noqa: B008 - typer's declaration style
            None, help="Dotlist overrides, e.g. ppo.steps=1 rollout.max_turns=2."
        ),
        resume: str = typer.Option(
            None,
            "--resume",
            metavar="RUN_DIR",
            help="Continue this run directory from its latest checkpoint; its recipe.yaml is the recipe, "
            "and overrides may only change ppo.steps, ppo.epochs, trainer.checkpoint_every, "
            "trainer.checkpoint_optimizer and logging.print_table / logging.tensorboard.",
        ),
        debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
    ) -> None:
        """Train a recipe: critic warm-up if enabled, then PPO steps; writes a run directory.

        Exit codes: 0 the run finished; 2 the recipe is invalid (it does not load or validate; no run
        directory is created); 1 the run failed, or the preflight refused the valid recipe before any work (a
        part not built, a missing host tool, a path the recipe names that is unusable here, a plan the
        capacity model refuses), as `t1 recipe validate` does; 130 interrupted by Ctrl-C, SIGTERM or SIGHUP
        (the run directory is kept, marked "interrupted" in status.json).

        With `--resume RUN_DIR` the run continues in RUN_DIR after its latest checkpoint's PPO step, with
        the weights, optimizer states, counters, task order and RNG states saved there (`t1.run.resume`);
        an override that would change the run's identity, or a missing, corrupt or foreign checkpoint, is
        refused by name (exit 2) before anything is built.
        """
        from t1.run.signals import stop_signals

        run = None
        try:
            # SIGTERM and SIGHUP stop the run as Ctrl-C does (trials cancelled, sandboxes reclaimed, the run
            # directory marked "interrupted"), from the first moment: the handlers go in before any import.
            with stop_signals() as token, reported(debug, invalid=(RecipeError,)):
                from t1.run import PreflightError, Run, RunFailed
                from t1_spec import load_recipe

                checkpoint = None
                if resume is not None:
                    from t1.run.resume import ResumeError, open_run

                    given = ([recipe] if recipe is not None else []) + list(overrides or [])
                    if given and "=" not in given[0]:
                        raise ResumeError(
                            f"--resume {resume}: the recipe is the run directory's recipe.yaml; drop "
                            f"{given[0]!r} (only dotlist overrides may follow)"
                        )
                    spec, resolved, checkpoint = open_run(resume, given)
                elif recipe is None:
                    raise ValueError("t1 train: give a recipe YAML, or --resume RUN_DIR")
                else:
                    spec = load_recipe(recipe, overrides or [])
                    resolved = spec.model_dump(mode="json", by_alias=True)
                try:
                    run = Run(spec, resolved, stop=token, resume_from=checkpoint)
                except PreflightError as exc:
                    # a valid recipe this machine cannot run (a path it lacks included): exit 1, as validate
                    message = f"[bold red]error:[/] {escape(str(exc))}"
                    err_console.print(message, highlight=False, soft_wrap=True)
                    raise typer.Exit(EXIT_CHECK_FAILED) from None
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
