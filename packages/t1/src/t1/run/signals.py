"""Stopping a run: SIGTERM and SIGHUP behave as Ctrl-C, through a stop token the loop checks.

A handler never mutates the loop's attributes and never raises inside the event loop: it records the signal
in a `StopToken` and cancels the rollout in progress (`run_interruptible`), as ``asyncio.run`` does on Ctrl-C.
The loop calls `StopToken.check` after every trial and every step, so a stop is never lost, not even one whose
``KeyboardInterrupt`` Python swallowed in an at-fork hook (every sandbox launch forks).

A stop cancels the rollout once; a second Ctrl-C, SIGTERM or SIGHUP while the cancelled rollout cleans up
(its sandboxes are being reclaimed) is absorbed, never raised into the event loop, so it cannot cut a reclaim
short and leave sandbox directories behind; within `stop_signals`, every signal after the first is absorbed,
up to the end of the process, so none cuts short the run's cleanup after the rollout, its final
``status.json`` included.
`deferred_signals` holds a signal back while any final status is written (a failed or finished run's too).

A run that keeps trials alive between steps (partial-rollout continuation, `t1_rollout.continuation`) runs
every rollout on one event loop, an ``asyncio.Runner`` it holds (`run_interruptible`'s ``runner``), and
cancels the parked trials on every exit path with `run_shielded`, which absorbs every stop signal until their
sandboxes are reclaimed.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
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


@dataclass
class _Session:
    """An open `stop_signals` block: its token, its Ctrl-C handler, and whether a stop is under way."""

    token: StopToken
    ctrl_c: Any = None  # None where SIGINT was not Python's default handler on entry
    stopping: bool = False


_SESSIONS: list[_Session] = []  # innermost last


def _mark_stopping(reason: str | None = None) -> None:
    """Mark the innermost `stop_signals` block, if any, as stopping: its handlers absorb further signals."""
    if _SESSIONS:
        if reason is not None:
            _SESSIONS[-1].token.request(reason)
        _SESSIONS[-1].stopping = True


def _interruptible_sigint(handler: Any) -> bool:
    """Whether ``handler`` is a Ctrl-C that stops (Python's default, or a `stop_signals` block's)."""
    return handler is signal.default_int_handler or any(handler is s.ctrl_c for s in _SESSIONS if s.ctrl_c)


def run_interruptible[T](coro: Coroutine[Any, Any, T], runner: asyncio.Runner | None = None) -> T:
    """``asyncio.run(coro)`` that Ctrl-C and `stop_as_ctrl_c` stop by cancelling it, once.

    Ctrl-C (where SIGINT has Python's default handler or `stop_signals`') cancels the coroutine as
    ``asyncio.run`` does; unlike ``asyncio.run``, a further Ctrl-C while the cancelled coroutine and the event
    loop's shutdown clean up is absorbed (a note goes to stderr) instead of raising ``KeyboardInterrupt`` in
    the middle of that clean-up. Inside `stop_signals` the stop is recorded in its token and marks it as
    stopping, so that its handlers go on absorbing signals through the caller's own cleanup after this returns
    (the parked trials, the run's final status).

    Args:
        coro: the coroutine.
        runner: run it on this runner's event loop, which outlives the call (tasks it leaves pending, such
            as parked trials, go on in the runner's next call); None = a fresh loop, closed afterwards.

    Raises:
        KeyboardInterrupt: after the cancelled coroutine has cleaned up (its sandboxes reclaimed), when a
            Ctrl-C, SIGTERM or SIGHUP stopped it.
    """
    entry: list = [None, False]

    async def main() -> T:
        entry[0] = asyncio.current_task()
        if entry[1]:  # stopped before it started: nothing to clean up, never start it
            coro.close()
            return None  # type: ignore[return-value]  # the KeyboardInterrupt is raised below, off the loop
        try:
            return await coro
        except asyncio.CancelledError:
            if entry[1]:
                raise KeyboardInterrupt from None
            raise

    def on_ctrl_c(signum: int, frame: object) -> None:
        if entry[1]:
            print("t1: stopping; reclaiming sandboxes first (a second Ctrl-C is ignored)", file=sys.stderr)
            return
        _mark_stopping(SIGNAL_NAMES[signal.SIGINT])
        _cancel(entry)  # never raises: it may run in any task's code on a shared runner's loop

    own = threading.current_thread() is threading.main_thread() and _interruptible_sigint(
        signal.getsignal(signal.SIGINT)
    )
    _RUNNING.append(entry)  # from before the task exists to after the loop is done with it
    previous = signal.signal(signal.SIGINT, on_ctrl_c) if own else None
    try:
        result = asyncio.run(main()) if runner is None else runner.run(main())
    finally:
        _RUNNING.remove(entry)
        if entry[1]:  # also a stop by `stop_as_ctrl_c` called directly
            _mark_stopping()
        if own:
            signal.signal(signal.SIGINT, previous)
    if entry[1]:  # stopped after the coroutine had already returned: still a stop
        raise KeyboardInterrupt
    return result


def run_shielded[T](coro: Coroutine[Any, Any, T], runner: asyncio.Runner) -> T:
    """Run ``coro`` on ``runner``'s loop to its end, every Ctrl-C, SIGTERM and SIGHUP meanwhile absorbed.

    For clean-ups that must not be cut short, such as cancelling the trials a run keeps parked between
    steps (their sandboxes are reclaimed before it returns) when a run ends, fails or is interrupted.
    A stop asked meanwhile is recorded by `stop_signals` (its token) and a note goes to stderr; it never
    cancels ``coro``.

    Raises:
        Exception: whatever ``coro`` raised.
    """
    entry: list = [None, True]  # marked as stopping already: `_cancel` and `stop_as_ctrl_c` leave it be

    async def main() -> T:
        entry[0] = asyncio.current_task()
        _RUNNING.append(entry)
        try:
            return await coro
        finally:
            _RUNNING.remove(entry)

    def on_ctrl_c(signum: int, frame: object) -> None:
        if stops:  # recorded, as a SIGTERM here is: the loop's next `StopToken.check` honours it
            _mark_stopping(SIGNAL_NAMES[signal.SIGINT])
        print("t1: reclaiming the parked trials' sandboxes first (Ctrl-C is ignored)", file=sys.stderr)

    own = threading.current_thread() is threading.main_thread()
    stops = own and _interruptible_sigint(signal.getsignal(signal.SIGINT))
    previous = signal.signal(signal.SIGINT, on_ctrl_c) if own else None
    try:
        return runner.run(main())
    finally:
        if own:
            signal.signal(signal.SIGINT, previous)


def _cancel(entry: list) -> None:
    """Cancel the task of a `run_interruptible` entry, the first time only (a stop is asked for once)."""
    if entry[1]:
        return
    entry[1] = True
    task = entry[0]
    if task is None or task.done():  # not started (it returns at once) or over (the loop shuts down)
        return
    task.cancel()
    task.get_loop().call_soon_threadsafe(lambda: None)  # wake the loop if it sleeps in select


@contextlib.contextmanager
def deferred_signals() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP back for the duration (delivered when it ends).

    For the write of a run's final ``status.json``: a second signal must not leave it saying ``running``.
    A no-op outside the main thread.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    before = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def stop_as_ctrl_c(signum: int, frame: object) -> None:
    """Signal handler: stop as Ctrl-C would, also where SIGINT is ignored, without raising in the event loop.

    A handler that raises while Python runs its at-fork hooks has its exception swallowed ("Exception ignored
    in _releaseLock"). So inside `run_interruptible` this cancels the running task, as ``asyncio.run``'s own
    SIGINT handler does, and returns; elsewhere (no sandbox launches there) it calls the SIGINT handler, or
    raises ``KeyboardInterrupt`` where SIGINT is ignored (a script's background job) or default.
    """
    if _RUNNING:
        _cancel(_RUNNING[-1])  # a second stop while the first one cleans up changes nothing
        return
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:
        raise KeyboardInterrupt


@contextlib.contextmanager
def stop_signals(token: StopToken | None = None) -> Iterator[StopToken]:
    """Make Ctrl-C, SIGTERM and SIGHUP one stop for the duration, recorded in ``token``, asked for once.

    SIGTERM and SIGHUP go to `stop_as_ctrl_c`. Ctrl-C keeps its effect: ``KeyboardInterrupt`` outside a
    rollout, the cancelled rollout inside `run_interruptible`; where SIGINT is ignored on entry (a script's
    background job) it stays ignored. Once a stop is under way (the first of these signals, or a
    ``KeyboardInterrupt`` leaving the block) every further one is absorbed with a note on stderr, to the end
    of the process, so that none cuts the cleanup short: trials cancelled, sandboxes reclaimed, the final
    status written. The previous handlers are restored on exit when no stop was asked for.

    Yields:
        The token (a new one when none is given).
    """
    token = token if token is not None else StopToken()
    session = _Session(token)

    def absorbed() -> bool:
        if session.stopping:
            print("t1: stopping; reclaiming sandboxes, writing the status (signal ignored)", file=sys.stderr)
        return session.stopping

    def on_signal(signum: int, frame: object) -> None:
        if absorbed():
            return
        token.request(SIGNAL_NAMES.get(signal.Signals(signum), signal.Signals(signum).name))
        try:
            stop_as_ctrl_c(signum, frame)  # may call `on_ctrl_c` below: mark the stop after it
        finally:
            session.stopping = True

    def on_ctrl_c(signum: int, frame: object) -> None:
        if absorbed():
            return
        token.request(SIGNAL_NAMES[signal.SIGINT])
        session.stopping = True
        raise KeyboardInterrupt  # outside a rollout: no sandbox launch forks here (see `stop_as_ctrl_c`)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGHUP)}
    if threading.current_thread() is threading.main_thread():
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            session.ctrl_c = on_ctrl_c
            previous[signal.SIGINT] = signal.signal(signal.SIGINT, on_ctrl_c)
    _SESSIONS.append(session)
    try:
        yield token
    except KeyboardInterrupt:
        # Past this block nothing is left to stop: Python's exit must not print tracebacks from library
        # atexit hooks on a further Ctrl-C.
        session.stopping = True
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        token.request(SIGNAL_NAMES[signal.SIGINT])
        raise
    finally:
        _SESSIONS.remove(session)
        if not session.stopping:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
