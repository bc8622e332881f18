"""`t1 train`: run a recipe end to end (embedded engine, local sandboxes, torch trainer)."""

from __future__ import annotations

import typer

from t1._errors import reported


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

        Exit codes: 0 the run finished; 2 the recipe is invalid (nothing was started); 1 the run failed.
        """
        from t1_spec import RecipeError, load_recipe

        with reported(debug, invalid=(RecipeError,)):
            spec = load_recipe(recipe, overrides or [])
            from t1.training import Trainer

            Trainer(spec, spec.model_dump(mode="json", by_alias=True)).run()
