"""`t1 recipe` verbs: validate, show, schema, diff.

Exit codes: 0 success; 1 ``validate`` found a valid recipe that ``t1 train`` would refuse here (its
preflight: a part not built, a host tool missing, a path the recipe names that this machine lacks, a plan
that does not fit); 2 invalid input (a recipe that does not load or validate, a missing file, bad
arguments). Errors go to stderr as one message naming the file and the dotted field, without a traceback
unless ``--debug``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from t1._errors import EXIT_CHECK_FAILED, err_console, reported
from t1_spec import (
    ABSENT,
    RecipeError,
    base_of,
    diff_recipes,
    export_schemas,
    load_recipe,
    recipe_to_dict,
    recipe_to_yaml,
)
from t1_spec.schema import SECTION_TYPES, all_schemas, render

app = typer.Typer(
    rich_markup_mode=None,  # help text is plain: a [word] is printed, not read as Rich markup
    help="Validate, print, diff recipes and export the spec's JSON Schemas (schema: t1/v1).",
    no_args_is_help=True,
)

INVALID = (RecipeError,)

RecipeArg = Annotated[Path, typer.Argument(help="recipe YAML, e.g. recipes/tiny-cpu.yaml")]
Overrides = Annotated[
    list[str] | None, typer.Argument(help="dotlist overrides applied after extends:, e.g. ppo.batch_size=2")
]
Debug = Annotated[bool, typer.Option("--debug", help="show tracebacks instead of a one-line error")]


def _shown(path: Path) -> Path:
    """``path`` relative to the working directory when it lies under it, as the user typed the recipe."""
    try:
        return Path(path).resolve().relative_to(Path.cwd())
    except ValueError:
        return Path(path)


def _console() -> Console:
    # Created per call so CliRunner's captured stdout is used; no soft wrapping of long values.
    return Console(soft_wrap=True, highlight=False)


def _diff_console() -> Console:
    # Piped output gets rich's 80-column fallback; a wider console wraps the values less.
    return _console() if sys.stdout.isatty() else Console(soft_wrap=True, highlight=False, width=160)


def _count(n: int) -> str:
    return f"{n / 1e9:.3f}B" if n >= 1e9 else f"{n / 1e6:.3f}M"


def _fmt(value: Any) -> str:
    if value is ABSENT:
        return "(absent)"
    return json.dumps(value) if not isinstance(value, str) else value


@app.command()
def validate(
    recipe: RecipeArg,
    overrides: Overrides = None,
    spec_only: Annotated[
        bool,
        typer.Option(
            "--spec-only",
            help="check the spec and the paper's rules only, not whether t1 train can run it on this machine",
        ),
    ] = False,
    debug: Debug = False,
) -> None:
    """Validate a recipe and run t1 train's preflight on it (exit 2: invalid; 1: not runnable here).

    Exit 0: valid, and t1 train's preflight accepts it on this machine. Exit 1: valid, but not runnable here;
    a path of the recipe that is unusable here (a pool that does not load or is too small for one step, a
    checkpoint or `logging.run_root` this machine lacks) is among those reasons, as in `t1 train`. Exit 2:
    the recipe does not load or validate (the spec and the paper's rules).

    The preflight is the one `t1 train` runs before any work: backends built, host tools present, settings the
    loop runs, and the capacity model's admission of the plan (T1 §7.1, Eq. 21); its lines are printed as
    `t1 train` prints them.
    """
    with reported(debug, invalid=INVALID):
        r = load_recipe(recipe, overrides or [])
        out = _console()
        m, p = r.model, r.plan
        out.print(f"[bold green]valid[/]: {recipe} ({r.name}, schema {r.schema_})")
        out.print(
            f"  model  {m.name}: {m.num_layers} layers ({m.num_full_attention_layers} full attention), "
            f"{m.num_experts} experts top-{m.top_k}; expert {_count(m.expert_params())}, "
            f"dense {_count(m.dense_params())}, active {_count(m.active_params())} parameters"
        )
        out.print(
            f"  plan   {p.devices} device{'s' * (p.devices != 1)} ({p.inference_devices} inference, "
            f"{p.training_devices} training): "
            f"tp {p.tp} pp {p.pp} cp {p.cp} dp {p.dp} ep {p.ep} etp {p.etp}, token wall {p.token_wall}"
        )
        steps = "until epochs" if r.ppo.steps is None else str(r.ppo.steps)
        out.print(
            f"  run    {r.reward.kind} reward, {r.ppo.advantage.estimator}, batch {r.ppo.batch_size} x "
            f"{r.ppo.samples_per_task}, steps {steps}, epochs {r.ppo.epochs}; engine {r.engine.kind}, "
            f"sandbox {r.sandbox.kind}, trainer {r.trainer.backend}"
        )
        if spec_only:
            for note in r.advisories():
                out.print(f"  [yellow]note[/] {note.field}: {escape(note.message)}", highlight=False)
            return
        from t1.run.console import print_notes
        from t1.run.preflight import preflight

        verdict = preflight(r)
        print_notes(out, r, verdict)  # the same notes t1 train prints before it starts or refuses
        if verdict.ok:
            out.print("  [green]runnable here[/]: t1 train's preflight accepts it")
            return
        err_console.print(f"[bold red]error:[/] {escape(verdict.message())}", highlight=False, soft_wrap=True)
        # The recipe is valid (printed above): whatever this machine lacks, paths included, is exit 1.
        raise typer.Exit(EXIT_CHECK_FAILED)


@app.command()
def show(
    recipe: RecipeArg,
    overrides: Overrides = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of YAML")] = False,
    debug: Debug = False,
) -> None:
    """Print the fully resolved recipe (extends merged, overrides applied, every default filled in)."""
    with reported(debug, invalid=INVALID):
        r = load_recipe(recipe, overrides or [])
        text = json.dumps(recipe_to_dict(r), indent=2) + "\n" if as_json else recipe_to_yaml(r)
        typer.echo(text, nl=False)


@app.command()
def schema(
    out: Annotated[
        Path | None, typer.Option("--out", help="write every schema into this folder (e.g. specs/v1)")
    ] = None,
    section: Annotated[
        str | None,
        typer.Option("--section", help=f"print one section's schema: {', '.join(SECTION_TYPES)}"),
    ] = None,
    debug: Debug = False,
) -> None:
    """Print the recipe JSON Schema, or write one schema per spec with --out."""
    with reported(debug, invalid=INVALID):
        if out is not None:
            if out.exists() and not out.is_dir():
                raise ValueError(f"--out {out}: exists and is not a folder; give a folder (made if missing)")
            for path in export_schemas(out):
                typer.echo(str(path))
            return
        schemas = all_schemas()
        if section is None:
            typer.echo(render(schemas["recipe.schema.json"]), nl=False)
            return
        if section not in SECTION_TYPES:
            raise ValueError(f"unknown section {section!r}; choose one of: {', '.join(SECTION_TYPES)}")
        typer.echo(render(schemas[f"{section}.schema.json"]), nl=False)


@app.command()
def diff(
    recipe: RecipeArg,
    overrides: Overrides = None,
    against: Annotated[
        Path | None,
        typer.Option("--against", help="recipe to compare with; default: the one this recipe extends"),
    ] = None,
    debug: Debug = False,
) -> None:
    """Show what a recipe changes against its base: dotted field, base value, new value (with defaults).

    Overrides apply to the recipe (the new side); with no `extends:` and no `--against`, the base is the
    recipe itself, so `t1 recipe diff R ppo.steps=1` shows what the overrides change.
    """
    with reported(debug, invalid=INVALID):
        base_path = against if against is not None else base_of(recipe)
        if base_path is None:
            if not overrides:
                raise ValueError(
                    f"{recipe} has no extends:; pass --against BASE to compare it with another recipe"
                )
            base_path = recipe
        base_path = _shown(base_path)
        new, base = load_recipe(recipe, overrides or []), load_recipe(base_path)
        changes = diff_recipes(base, new)
        shown = " ".join([str(recipe), *(overrides or [])])
        out = _diff_console()
        if not changes:
            out.print(f"no differences between {shown} and {base_path}")
            return
        table = Table(title=f"{shown} against {base_path}", title_justify="left")
        # A dotted field name is never broken: it is what users copy into an override.
        table.add_column("field", no_wrap=True, min_width=max(len(c.field) for c in changes))
        table.add_column("base", overflow="fold")
        table.add_column("new", overflow="fold")
        for c in changes:
            table.add_row(c.field, _fmt(c.base), _fmt(c.new))
        out.print(table)
