r"""``DaytonaShell``: the trial's persistent interactive bash in a Daytona sandbox, on the toolbox's PTY.

The SDK's ``process.create_pty_session`` opens a pseudo-terminal (160 x 40, as Terminus's pane) over the
toolbox websocket; the daemon starts the image's login shell there (``$SHELL -i -l``), and the first line
typed replaces it with ``exec env T1_SANDBOX_TAG=<tag> PS1=... bash --noprofile --norc --noediting -i``, so
the agent gets the same plain bash as on the local and Docker backends whatever the image's profile does,
and every process it starts carries the sandbox's exec tag (``stop_agent`` kills them by it). Output frames
arrive through the SDK's callback; what the agent reads of them and when a command counts as done are
`t1_sandbox.terminal`'s (the bound, the omitted line at the cut, the prompt marker of a per-shell nonce that
``PS1`` and ``PS2`` carry; with no view of bash's process, the polling rule: idle when a prompt arrived and
nothing else for ``POLL_S``, twice, which a marker the agent prints itself passes). A program reading the
terminal itself (a REPL, ``cat``) shows no prompt, so ``send`` then waits its full ``duration_s``, as a
tmux pane would.

The daemon closes the websocket with the shell's exit status when bash exits (its ``exitCode`` in the close
frame, SDK 0.226 ``AsyncPtyHandle.exit_code``): that is the agent's doing (`ShellDied`). A connection that
ends without an exit status (a dropped websocket, a stopped sandbox) is an infrastructure failure
(`SandboxError`). Sources: SDK 0.226 ``AsyncProcess.create_pty_session``, ``AsyncPtyHandle``; the Daytona
daemon's PTY session (``$SHELL -i -l``, binary output frames, the exit status in the close frame).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from t1_sandbox.base import SandboxError, SandboxTimeout, Shell, ShellDied, format_seconds
from t1_sandbox.terminal import (
    MAX_UNREAD,
    POLL_S,
    TerminalOutput,
    prompt_env,
    settle,
    translate_keys,
)
from t1_sandbox.transfer import shell_quote

if TYPE_CHECKING:
    from daytona.handle.async_pty_handle import AsyncPtyHandle

__all__ = ["PTY_COLS", "PTY_ROWS", "DaytonaShell", "launch_line"]

#: The terminal's size, Terminus's pane (harbor_tb.md §3).
PTY_COLS, PTY_ROWS = 160, 40


def launch_line(nonce: str, tag: str) -> str:
    """The first line typed into the login shell: replace it with T1's bash, tagged, prompts marked.

    Args:
        nonce: the prompt marker's nonce (`t1_sandbox.terminal.new_nonce`).
        tag: the value of ``T1_SANDBOX_TAG`` for bash and everything it starts.
    """
    env = {"T1_SANDBOX_TAG": tag, **prompt_env(nonce)}
    assigns = " ".join(f"{k}={shell_quote(v)}" for k, v in env.items())
    return f"exec env {assigns} bash --noprofile --norc --noediting -i\n"


class DaytonaShell(Shell):
    """Interactive bash on one Daytona PTY session (made by ``DaytonaSandbox.open_shell``).

    Output reaches `on_data` (the SDK's callback) before `attach` gives the shell its handle.

    Args:
        nonce: the marker nonce of its prompts (`launch_line`).
        session_id: the PTY session's id (for messages).
        kill: coroutine that kills the PTY session and everything it started (the toolbox's delete).
    """

    MAX_UNREAD = MAX_UNREAD

    def __init__(self, nonce: str, session_id: str, *, kill: Callable[[], Awaitable[None]]) -> None:
        self.session_id = session_id
        self._out = TerminalOutput(nonce)
        self._kill_fn = kill
        self._handle: AsyncPtyHandle | None = None
        self._closed = False

    def attach(self, handle: AsyncPtyHandle) -> None:
        """Give the shell the SDK's handle of its PTY session (input, liveness, exit status)."""
        self._handle = handle

    def on_data(self, data: bytes) -> None:
        """Take one output frame of the PTY (the SDK's ``on_data`` callback); never blocks."""
        self._out.feed(data)

    @property
    def alive(self) -> bool:
        """Whether bash is still running (its websocket is open and no exit status has come)."""
        handle = self._handle
        return not self._closed and handle is not None and handle.is_connected() and handle.exit_code is None

    def _dead(self) -> SandboxError:
        """Why the shell is gone: its exit status (the agent's doing) or a lost connection (ours)."""
        handle = self._handle
        code = handle.exit_code if handle is not None else None
        if code is not None:
            return ShellDied(
                f"the shell is dead: it exited on its own (exit {code}); open a new sandbox", exit_code=code
            )
        why = (handle.error if handle is not None else None) or "closed without an exit status"
        return SandboxError(
            f"the shell's websocket to the Daytona toolbox (PTY session {self.session_id}) ended: {why}; "
            "an infrastructure failure (connection or sandbox lost), not the agent's doing"
        )

    async def wait_first_prompt(self, timeout_s: float) -> None:
        """Wait for the first marked prompt, then drop what came before it (the login shell, the echo).

        The prompt itself stays: the first read shows it before the first command's echo.

        Raises:
            SandboxError: bash exited or the websocket closed at start (with what it printed).
            SandboxTimeout: no prompt within ``timeout_s`` (is ``bash`` in the image?).
        """
        end = time.monotonic() + timeout_s
        while not self._out.idle():
            if not self.alive:
                seen = self._out.seen()[-2000:]
                raise SandboxError(f"{self._dead()} (at start; it printed {seen!r})")
            if time.monotonic() > end:
                seen = self._out.seen()[-500:]
                raise SandboxTimeout(
                    f"shell showed no prompt within {format_seconds(timeout_s)} (does the image have bash?); "
                    f"it printed {seen!r}"
                )
            await asyncio.sleep(POLL_S)
        self._out.drop_before_prompt()

    async def send(self, keystrokes: str, *, duration_s: float, max_wait_s: float) -> str:
        """Type ``keystrokes``; wait up to ``min(duration_s, max_wait_s)`` s or until idle; return new output.

        Raises:
            ShellDied: bash exited on its own before this call (the agent's doing).
            SandboxError: the shell was closed by the sandbox, or its websocket ended without an exit status.
            SandboxTimeout: the keystrokes were not taken within ``max_wait_s``.
        """
        if self._closed:
            raise SandboxError("send on a closed shell (the sandbox killed it); open a new sandbox")
        if not self.alive:
            raise self._dead()
        assert self._handle is not None
        started = time.monotonic()
        end = started + max(0.0, min(duration_s, max_wait_s))
        if keystrokes:
            self._out.typed()
            try:
                await asyncio.wait_for(
                    self._handle.send_input(translate_keys(keystrokes).encode()), timeout=max(0.1, max_wait_s)
                )
            except TimeoutError:
                raise SandboxTimeout(
                    f"shell input not taken by the Daytona toolbox within {format_seconds(max_wait_s)}"
                ) from None
            except Exception as exc:  # the SDK's DaytonaConnectionError: the websocket is gone
                if not self.alive:
                    raise self._dead() from exc
                raise SandboxError(f"the shell's websocket to the Daytona toolbox broke: {exc}") from exc
        await settle(
            self._out, until=end, alive=lambda: self.alive, typed=bool(keystrokes), idle=self._out.idle
        )
        await asyncio.sleep(0)
        return self._out.take()

    async def close(self) -> None:
        """Kill bash and everything it started (the toolbox's PTY delete), drop the websocket; idempotent.

        Raises:
            SandboxError: the toolbox did not kill the session (its sandbox's delete still will).
        """
        if self._closed:
            return
        self._closed = True
        try:
            await self._kill_fn()
        finally:
            if self._handle is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._handle.disconnect(), 5)
