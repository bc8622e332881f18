"""Stopping a run: SIGTERM and SIGHUP behave as Ctrl-C, through a stop token the loop checks.

A handler never mutates the loop's attributes and never raises inside the event loop: it records the signal
in a `StopToken` and cancels the rollout in progress (`run_interruptible`), as ``asyncio.run`` does on Ctrl-C.
The loop calls `StopToken.check` after every trial and every step, so a stop is never lost, not even one whose
``KeyboardInterrupt`` Python swallowed in an at-fork hook (every sandbox launch forks).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

SIGNAL_NAMES = {signal.SIGINT: "Ctrl-C (SIGINT)", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}
"""What ``status.json`` names for each stop signal."""


@dataclass
class StopToken:
    """A request to stop, set by a signal handler and honoured by the loop at its next check.

    Attributes:
        reason: the signal that asked, as ``status.json`` names it (``"SIGTERM"``); ``None`` until one did.
    """

    reason: str | None = None

    @property
    def requested(self) -> bool:
        """Whether a stop was asked for."""
        return self.reason is not None

    def request(self, reason: str) -> None:
        """Ask the loop to stop; the first reason is kept."""
        if self.reason is None:
            self.reason = reason

    def check(self) -> None:
        """Raise ``KeyboardInterrupt`` when a stop was asked for (the loop's cleanup path for Ctrl-C).

        Raises:
            KeyboardInterrupt: a stop was requested.
        """
        if self.requested:
            raise KeyboardInterrupt


# The innermost `run_interruptible` in progress: (its task, whether a signal cancelled it).
_RUNNING: list[list] = []


def run_interruptible[T](coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)`` that `stop_as_ctrl_c` stops by cancelling it, as Ctrl-C stops ``asyncio.run``.

    Raises:
        KeyboardInterrupt: after the cancelled coroutine has cleaned up (its sandboxes reclaimed), when a
            SIGTERM or SIGHUP stopped it.
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
    """Signal handler: stop as Ctrl-C would, also where SIGINT is ignored, without raising in the event loop.

    A handler that raises while Python runs its at-fork hooks has its exception swallowed ("Exception ignored
    in _releaseLock"). So inside `run_interruptible` this cancels the running task, as ``asyncio.run``'s own
    SIGINT handler does, and returns; elsewhere (no sandbox launches there) it calls the SIGINT handler, or
    raises ``KeyboardInterrupt`` where SIGINT is ignored (a script's background job) or default.
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


@contextlib.contextmanager
def stop_signals(token: StopToken | None = None) -> Iterator[StopToken]:
    """Route SIGTERM and SIGHUP to `stop_as_ctrl_c` for the duration, recording each in ``token``.

    Ctrl-C keeps Python's own handler (``KeyboardInterrupt``, or the cancelled ``asyncio.run`` task); only its
    reason is recorded when it arrives through here. The previous handlers are restored on exit.

    Yields:
        The token (a new one when none is given).
    """
    token = token if token is not None else StopToken()
    stopping = [False]

    def on_signal(signum: int, frame: object) -> None:
        if stopping[0]:  # shutdown already under way: a second signal must not interrupt the cleanup
            return
        token.request(SIGNAL_NAMES.get(signal.Signals(signum), signal.Signals(signum).name))
        stop_as_ctrl_c(signum, frame)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield token
    except KeyboardInterrupt:
        # The cleanup after a stop (sandboxes reclaimed, status written) must not be cut short by another
        # signal, nor print tracebacks from library atexit hooks.
        stopping[0] = True
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        token.request(SIGNAL_NAMES[signal.SIGINT])
        raise
    finally:
        if not stopping[0]:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
