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


@pytest.fixture
def handlers_restored():
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


async def _stopped_by_ctrl_c() -> None:
    signal.raise_signal(signal.SIGINT)
    await asyncio.sleep(10)


def test_a_signal_after_the_stopped_rollout_returned_cannot_cut_the_cleanup_short(handlers_restored):
    # The rollout reclaimed its sandboxes fast; the second Ctrl-C lands while the run writes its status.
    from t1.run.signals import run_interruptible, stop_signals

    cleanup = []
    with stop_signals() as token:
        try:
            run_interruptible(_stopped_by_ctrl_c())
        except KeyboardInterrupt:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.raise_signal(sig)  # absorbed: must not raise here
            cleanup.append("status written")
    assert cleanup == ["status written"]
    assert token.reason == "Ctrl-C (SIGINT)"  # the first signal, not a later one
    signal.raise_signal(signal.SIGINT)  # still absorbed after the block: the process is on its way out


def test_a_second_ctrl_c_outside_a_rollout_cannot_cut_the_cleanup_short(handlers_restored):
    # Ctrl-C during the trainer's update (no event loop), then another while the run reclaims and writes.
    from t1.run.signals import stop_signals

    cleanup = []
    with stop_signals() as token:
        try:
            signal.raise_signal(signal.SIGINT)
            cleanup.append("not reached")
        except KeyboardInterrupt:
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGTERM)
            cleanup.append("status written")
    assert cleanup == ["status written"]
    assert token.reason == "Ctrl-C (SIGINT)"


def test_sigterm_outside_a_rollout_stops_once_and_keeps_its_name(handlers_restored):
    from t1.run.signals import stop_signals

    with stop_signals() as token:
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGINT)  # absorbed
    assert token.reason == "SIGTERM"


def test_where_sigint_is_ignored_stop_signals_leaves_it_ignored(handlers_restored):
    from t1.run.signals import stop_signals

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with stop_signals():
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        signal.raise_signal(signal.SIGINT)  # ignored, as a background job's
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_outside_stop_signals_a_stopped_rollout_puts_ctrl_c_back(handlers_restored):
    from t1.run.signals import run_interruptible

    with pytest.raises(KeyboardInterrupt):
        run_interruptible(_stopped_by_ctrl_c())
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)


def test_a_run_that_is_not_stopped_gets_its_handlers_back(handlers_restored):
    from t1.run.signals import run_interruptible, stop_signals

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}

    async def done() -> int:
        return 3

    with stop_signals():
        assert run_interruptible(done()) == 3
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_a_stop_before_the_rollout_starts_on_a_shared_loop_never_starts_it(handlers_restored):
    # A parked trial's step runs before the rollout's first one: a Ctrl-C there must not raise in the parked
    # trial's code, nor leave the rollout pending for the run's shielded clean-up to start.
    from t1.run.signals import run_interruptible, stop_signals

    log = []

    async def park() -> asyncio.Task:
        async def parked() -> None:
            await asyncio.sleep(0)  # its next step is left in the loop's queue when this call ends
            signal.raise_signal(signal.SIGINT)
            await asyncio.sleep(10)

        return asyncio.ensure_future(parked())

    async def rollout() -> None:
        log.append("rollout started")

    async def cancel_rest() -> None:
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in others:
            t.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    with asyncio.Runner() as runner, stop_signals() as token:
        parked = runner.run(park())
        with pytest.raises(KeyboardInterrupt):
            run_interruptible(rollout(), runner)
        assert not parked.done()  # not killed by a KeyboardInterrupt raised in its code
        runner.run(cancel_rest())
    assert log == [] and token.reason == "Ctrl-C (SIGINT)"


def test_where_sigint_is_ignored_sigterm_during_the_loop_shutdown_is_not_raised_in_it(handlers_restored):
    from t1.run.signals import run_interruptible, stop_signals

    finalized = []

    async def agen():
        try:
            yield 1
        finally:
            signal.raise_signal(signal.SIGTERM)  # runs in the loop's shutdown_asyncgens
            finalized.append(True)

    kept = []

    async def rollout() -> None:
        g = agen()
        await g.__anext__()
        kept.append(g)

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with stop_signals() as token:
        with pytest.raises(KeyboardInterrupt):
            run_interruptible(rollout())
    assert finalized == [True] and token.reason == "SIGTERM"


def test_ctrl_c_during_a_shielded_clean_up_is_recorded_as_sigterm_is(handlers_restored):
    from t1.run.signals import run_shielded, stop_signals

    async def release() -> None:
        signal.raise_signal(signal.SIGINT)

    with asyncio.Runner() as runner, stop_signals() as token:
        run_shielded(release(), runner)
    assert token.reason == "Ctrl-C (SIGINT)"
