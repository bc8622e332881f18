"""`t1 tasks synth`: write generated task bundles (`t1_tasks.synth`), optionally as a train / held-out split.

Mounted on the ``t1 tasks`` app of `t1.cli_tasks`. Exit codes: 0 written; 2 invalid input (an unknown family,
a bad size or more than `MAX_BUNDLES` in all, an ``--out`` that is a file or cannot be created, a bundle
already at the destination without ``--overwrite``, too few distinct instances).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from t1._errors import reported
from t1.cli_tasks import Debug, app
from t1_tasks.synth import FAMILIES, SplitError, generate, synth_split, write_bundle, write_split

MAX_BUNDLES = 100_000
"""The most bundles (``--count`` plus ``--heldout``) one call writes: every instance is drawn in memory."""


def _bundles(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _make_out(out: Path) -> None:
    """Create ``--out`` (and its parents) before any instance is drawn; a message naming it when it cannot be.

    Raises:
        ValueError: ``out`` is a file, or it cannot be created (a missing or read-only parent, ``/proc``).
    """
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: is a file, not a folder; give a folder to write the bundles into")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"--out {out}: cannot create the folder: {exc.strerror or exc}") from None


@app.command()
def synth(
    out: Annotated[Path, typer.Option("--out", help="the folder to write the bundles (or the split) into")],
    family: Annotated[
        list[str],
        typer.Option("--family", help=f"a task family, repeatable: {', '.join(sorted(FAMILIES))}"),
    ],
    count: Annotated[int, typer.Option("--count", min=1, help="bundles to write (the training side)")] = 10,
    heldout: Annotated[
        int, typer.Option("--heldout", min=0, help="also write this many held-out bundles (OUT/heldout)")
    ] = 0,
    seed: Annotated[int, typer.Option("--seed", min=0, help="the first seed of every family")] = 0,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="replace bundles already there")] = False,
    debug: Debug = False,
) -> None:
    """Write generated task bundles: text, CSV and file transformations with per-assertion verifiers.

    Draws COUNT instances round-robin over the families, seeds counting up from SEED, none repeating a
    parameter tuple (`t1_tasks.synth.synth_split`), each a Harbor bundle with a reference solution
    (`t1 tasks validate OUT` runs it). With `--heldout M` the COUNT instances go to OUT/train and M more to
    OUT/heldout, sharing no seed and no parameter tuple with the training side, and OUT/split.json lists
    both; each side is a pool directory for a recipe's `pool.source` or `t1 eval`.
    """
    with reported(debug, invalid=(SplitError, FileExistsError)):
        for f in family:
            if f not in FAMILIES:
                raise ValueError(f"--family {f!r}: unknown; known are {', '.join(sorted(FAMILIES))}")
        if count + heldout > MAX_BUNDLES:
            raise ValueError(
                f"--count {count} --heldout {heldout}: at most {MAX_BUNDLES:,} bundles a call (every "
                "instance is drawn in memory before the first is written); ask for fewer"
            )
        _make_out(out)
        split = synth_split(family, count, heldout, seed=seed)
        if heldout:
            dirs = write_split(split, out, overwrite=overwrite)
            typer.echo(
                f"wrote {_bundles(count, 'training bundle')} to {dirs['train']}, {heldout} held-out to "
                f"{dirs['heldout']}"
            )
        else:
            for key in split.train:
                write_bundle(generate(*key), out, overwrite=overwrite)
            typer.echo(f"wrote {_bundles(count, 'bundle')} to {out}")
        if split.skipped:
            typer.echo(f"{len(split.skipped)} seeds skipped: their parameter tuple was already drawn")
