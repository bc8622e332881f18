"""`t1 plan` verbs."""

from __future__ import annotations

import typer

app = typer.Typer(help="plan verbs (not built yet).", no_args_is_help=True)
