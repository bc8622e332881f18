"""`t1 tasks` verbs."""

from __future__ import annotations

import typer

app = typer.Typer(help="tasks verbs (not built yet).", no_args_is_help=True)
