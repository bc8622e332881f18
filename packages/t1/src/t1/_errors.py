"""Uniform error reporting for the CLI: a message on stderr, no traceback unless ``--debug``."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import typer
from rich.console import Console
from rich.markup import escape

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_INVALID_INPUT = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, the shell convention for Ctrl-C

err_console = Console(stderr=True)


@contextlib.contextmanager
def reported(debug: bool, *, invalid: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """Turn exceptions into a one-line stderr message and an exit code.

    Args:
        debug: also print the full traceback (on stderr); the exit code is the same as without it.
        invalid: exception types that mean invalid input (exit 2); anything else exits 1.

    Raises:
        SystemExit: with code 2 for ``invalid`` (and ``FileNotFoundError``, ``ValueError``), 1 otherwise.
    """
    try:
        yield
    except (
        SystemExit,
        KeyboardInterrupt,
        typer.Exit,
        typer.Abort,
        click.exceptions.Exit,
        click.exceptions.Abort,
    ):
        raise
    except BaseException as exc:  # noqa: BLE001 - the CLI boundary reports everything
        code = EXIT_INVALID_INPUT if isinstance(exc, invalid + (FileNotFoundError, ValueError)) else 1
        if debug:  # the traceback, then the same code: a script adding --debug still tells 2 from 1
            import traceback

            traceback.print_exception(exc, file=sys.stderr)
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(code)


def check_output_file(path: Path, option: str, example: str) -> None:
    """Refuse an output file option that cannot be written, before any work is done.

    Args:
        path: the file the command would write.
        option: the option's name as typed (``--out``, ``--png``), for the message.
        example: a file name to suggest inside ``path`` when ``path`` is a directory.

    Raises:
        ValueError: ``path`` is a directory, or its parent is not an existing directory (exit 2 under
            `reported`).
    """
    if path.is_dir():
        raise ValueError(f"{option} {path} is a directory; give a file path, e.g. {path / example}")
    if not path.parent.is_dir():
        what = "is not a directory" if path.parent.exists() else "does not exist"
        raise ValueError(
            f"{option} {path}: {path.parent} {what}; create the directory or choose another path"
        )
