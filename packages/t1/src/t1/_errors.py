"""Uniform error reporting for the CLI: a message on stderr, no traceback unless ``--debug``."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Coroutine, Iterator
from typing import Any

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
        debug: re-raise with the full traceback instead.
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
        if debug:
            raise
        code = EXIT_INVALID_INPUT if isinstance(exc, invalid + (FileNotFoundError, ValueError)) else 1
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(code)


# The innermost `run_interruptible` in progress: (its task, whether a signal cancelled it).
_RUNNING: list[list] = []


def run_interruptible[T](coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)`` that `stop_as_ctrl_c` stops by cancelling it, as Ctrl-C stops ``asyncio.run``.

    Raises:
        KeyboardInterrupt: after the cancelled coroutine has cleaned up (its sandboxes reclaimed), when a
            SIGTERM stopped it.
    """

    async def main() -> T:
        entry = [asyncio.current_task(), False]
        _RUNNING.append(entry)
        try:
            return await coro
        except asyncio.CancelledError:
            if entry[1]:
                raise KeyboardInterrupt from None
            raise
        finally:
            _RUNNING.remove(entry)

    return asyncio.run(main())


def stop_as_ctrl_c(signum: int, frame: object) -> None:
    """SIGTERM handler: stop as Ctrl-C would, also where SIGINT is ignored, without raising in the event loop.

    A handler that raises while Python runs its at-fork hooks (every sandbox launch forks) has its exception
    swallowed ("Exception ignored in _releaseLock"). So inside `run_interruptible` this cancels the running
    task, as ``asyncio.run``'s own SIGINT handler does, and returns; elsewhere (no sandbox launches there) it
    calls the SIGINT handler, or raises ``KeyboardInterrupt`` where SIGINT is ignored (a script's background
    job) or default.
    """
    if _RUNNING:
        entry = _RUNNING[-1]
        entry[1] = True
        entry[0].cancel()
        entry[0].get_loop().call_soon_threadsafe(lambda: None)  # wake the loop if it sleeps in select
        return
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:
        raise KeyboardInterrupt
