"""`t1 sft`: the supervised warm start a recipe's ``sft`` section declares, before ``t1 train``.

Replays each task's reference solution through the harness (or reads recorded conversations), stitches them
with the run's tokenizer, chat template and TITO session, fits the actor by cross-entropy on the assistant
tokens and writes ``<sft.output>/weights/actor.safetensors``; ``model.init: checkpoint`` with
``model.checkpoint: <sft.output>`` starts ``t1 train`` from it.
"""

from __future__ import annotations

import typer
from rich.markup import escape

from t1._errors import EXIT_CHECK_FAILED, err_console, reported
from t1_spec import RecipeError


def register(app: typer.Typer) -> None:
    """Mount the ``sft`` verb on the top-level app."""

    @app.command()
    def sft(
        recipe: str = typer.Argument(
            ..., help="Recipe YAML with an sft section, e.g. recipes/tiny-learn.yaml."
        ),
        overrides: list[str] = typer.Argument(  # noqa: B008 - typer's declaration style
            None, help="Dotlist overrides, e.g. sft.epochs=5 sft.output=/tmp/sft."
        ),
        overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing SFT directory."),
        quiet: bool = typer.Option(False, "--quiet", help="No per-epoch lines."),
        debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
    ) -> None:
        """Fit the actor to expert trajectories (the recipe's sft section) and save it for `t1 train`.

        Exit codes: 0 the weights were written; 2 the recipe is invalid, has no sft section, or its SFT
        directory exists and --overwrite was not given; 1 a file the valid recipe names is missing here (the
        trajectories file, a checkpoint), or the fit failed (no replay passed, a non-finite update).
        """
        with reported(debug, invalid=(RecipeError, FileExistsError)):
            from t1.run.sft import run_sft, sft_output
            from t1_spec import load_recipe

            spec = load_recipe(recipe, overrides or [])
            out = sft_output(spec)

            def show(row: dict) -> None:
                if not quiet:
                    err_console.print(
                        f"sft epoch {row['epoch']:>3}  loss {row['sft/loss']:.4f}  "
                        f"token acc {row['sft/token_accuracy']:.3f}  lr {row['sft/lr']:.2e}  "
                        f"{row['sft/time_s']:.1f}s",
                        highlight=False,
                    )

            err_console.print(f"sft: {spec.name} -> {out}", highlight=False)
            try:
                result = run_sft(spec, overwrite=overwrite, on_epoch=show)
            except FileNotFoundError as exc:
                # the recipe is valid; a file it names is absent on this machine: exit 1, as t1 train does
                err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
                raise typer.Exit(EXIT_CHECK_FAILED) from None
            for line in result.dropped:
                err_console.print(f"[yellow]left out:[/] {line}", highlight=False, soft_wrap=True)
            first, last = result.epochs[0], result.epochs[-1]
            typer.echo(
                f"sft: {result.conversations} conversations, {result.samples} samples, "
                f"{result.loss_tokens} assistant tokens per epoch; loss {first['sft/loss']:.4f} -> "
                f"{last['sft/loss']:.4f} in {len(result.epochs)} epochs, {result.time_s:.0f} s; "
                f"weights {result.weights}"
            )
