"""`t1 train`'s SIGTERM handler behaves as Ctrl-C and never raises inside the event loop."""

from __future__ import annotations

import asyncio
import signal

import pytest

from t1.run.signals import stop_as_ctrl_c


def test_outside_the_event_loop_sigterm_raises_keyboard_interrupt():
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        stop_as_ctrl_c(signal.SIGTERM, None)


def test_inside_asyncio_run_sigterm_cancels_the_main_task_without_raising():
    # A handler that raised here could land in an at-fork hook (sandbox launches fork) and be swallowed;
    # asyncio's SIGINT handler cancels the main task instead; asyncio.run then raises KeyboardInterrupt.
    reached = []

    async def main() -> None:
        stop_as_ctrl_c(signal.SIGTERM, None)  # must return normally
        reached.append("after handler")
        await asyncio.sleep(10)
        reached.append("slept")

    with pytest.raises(KeyboardInterrupt):
        asyncio.run(main())
    assert reached == ["after handler"]


def test_sigterm_still_stops_where_sigint_is_ignored():
    # a background job of a non-interactive script starts with SIGINT ignored; SIGTERM must still stop it
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with pytest.raises(KeyboardInterrupt):
            stop_as_ctrl_c(signal.SIGTERM, None)
    finally:
        signal.signal(signal.SIGINT, previous)


def test_inside_run_interruptible_sigterm_cancels_without_raising_even_where_sigint_is_ignored():
    from t1.run.signals import run_interruptible

    reached = []

    async def main() -> None:
        try:
            stop_as_ctrl_c(signal.SIGTERM, None)  # must return normally: no exception to lose in a fork hook
            reached.append("after handler")
            await asyncio.sleep(10)
        finally:
            reached.append("cleaned up")

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_interruptible(main())
    finally:
        signal.signal(signal.SIGINT, previous)
    assert reached == ["after handler", "cleaned up"]
