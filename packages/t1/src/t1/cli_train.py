"""`t1 train`: run a recipe end to end."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Mount the ``train`` verb on the top-level app."""

    @app.command()
    def train(recipe: str, overrides: list[str] = typer.Argument(None)) -> None:  # noqa: B008
        """Train a recipe (not built yet)."""
        raise typer.Exit(2)
