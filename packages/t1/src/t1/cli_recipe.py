"""`t1 recipe` verbs."""

from __future__ import annotations

import typer

app = typer.Typer(help="recipe verbs (not built yet).", no_args_is_help=True)
