r"""``DockerShell``: the trial's persistent interactive bash in a Docker sandbox, on the exec's terminal.

bash runs under the launcher (``t1run.py``) in an exec with a terminal (160 x 40, as Terminus's pane); the
exec's hijacked socket carries keystrokes in and the terminal's output out. What the agent reads and when a
command counts as done are `t1_sandbox.terminal`'s. When the daemon runs on this host, bash is a process
here (`t1_sandbox.bash_view`) and a command is done the moment its prompt arrives and the kernel confirms
it, as on the local shell. Otherwise T1 has no view of bash's process and the polling rule decides: the
shell is idle when its prompt (``PS1`` or ``PS2``, each carrying an invisible marker with a per-shell nonce)
has arrived since the last keystrokes and nothing else for ``POLL_S``, twice; a marker the agent's command
prints itself passes for a prompt then. A program reading the terminal itself (a REPL, ``cat``) shows no
prompt, so ``send`` waits its full ``duration_s`` then, as a tmux pane would.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Awaitable, Callable

from t1_sandbox.base import SandboxError, SandboxTimeout, Shell, ShellDied, format_seconds
from t1_sandbox.bash_view import BashView
from t1_sandbox.terminal import (
    MAX_UNREAD,
    POLL_S,
    TerminalOutput,
    settle,
    translate_keys,
)

__all__ = ["DockerShell"]


class DockerShell(Shell):
    """Interactive bash on the terminal of one ``docker exec`` (made by ``DockerSandbox.open_shell``).

    Args:
        sock: the exec's hijacked socket (non-blocking).
        nonce: the marker nonce of its prompts (`t1_sandbox.terminal.prompt_env`).
        exit_code: coroutine giving the exec's exit status once it ended (``None`` when unknown).
        kill: coroutine killing the shell and everything it started.
    """

    MAX_UNREAD = MAX_UNREAD

    def __init__(
        self,
        sock: socket.socket,
        nonce: str,
        *,
        exit_code: Callable[[], Awaitable[int | None]],
        kill: Callable[[], Awaitable[None]],
    ) -> None:
        self._sock = sock
        self._out = TerminalOutput(nonce)
        self._exit_code = exit_code
        self._kill_fn = kill
        self._eof = False
        self._closed = False
        #: the kernel's view of bash when the daemon runs on this host (set by the sandbox), else None
        self.view: BashView | None = None
        asyncio.get_running_loop().add_reader(sock.fileno(), self._on_readable)

    def _on_readable(self) -> None:
        try:
            for _ in range(16):  # bounded per call so that a flood cannot starve the event loop
                data = self._sock.recv(65536)
                if not data:
                    self._eof = True
                    asyncio.get_running_loop().remove_reader(self._sock.fileno())
                    return
                self._out.feed(data)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._eof = True
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._sock.fileno())

    @property
    def alive(self) -> bool:
        """Whether bash is still running (its exec's stream is open)."""
        return not self._closed and not self._eof

    def _idle(self) -> bool:
        """The polling rule's sign: a prompt and ``POLL_S`` of quiet, and bash at it where T1 sees bash."""
        return self._out.idle() and (self.view is None or self.view.reads_terminal())

    async def attach_view(self, view: BashView | None, timeout_s: float = 2.0) -> None:
        """Take the kernel's view of bash (None: none on this host) at its first prompt, before any keystroke.

        The view learns where bash's top-level prompt reads (`BashView.learn_prompt`), trying for up to
        ``timeout_s`` seconds; unlearnt, it confirms no prompt and every wait runs to its duration.
        """
        self.view = view
        end = time.monotonic() + timeout_s
        while view is not None and not view.learn_prompt() and time.monotonic() < end:
            await asyncio.sleep(POLL_S)

    def detach(self) -> None:
        """Stop reading and close the exec's socket (the container is being removed with bash in it)."""
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
        with contextlib.suppress(OSError):
            self._sock.close()

    async def wait_first_prompt(self, timeout_s: float) -> None:
        """Wait for the first prompt, then drop what came before it.

        Raises:
            SandboxError: bash exited at start.
            SandboxTimeout: no prompt within ``timeout_s``.
        """
        end = time.monotonic() + timeout_s
        while not self._out.idle():
            if self._eof:
                raise SandboxError(f"shell exited at start: {self._out.seen()}")
            if time.monotonic() > end:
                raise SandboxTimeout(f"shell showed no prompt within {format_seconds(timeout_s)}")
            await asyncio.sleep(POLL_S)
        self._out.drop_before_prompt()

    async def send(self, keystrokes: str, *, duration_s: float, max_wait_s: float) -> str:
        """Type ``keystrokes``; wait up to ``min(duration_s, max_wait_s)`` s or until idle; return new output.

        Raises:
            ShellDied: bash exited on its own before this call (the agent's doing).
            SandboxError: the shell was closed by the sandbox.
            SandboxTimeout: the keystrokes were not taken within ``max_wait_s``.
        """
        if self._closed:
            raise SandboxError("send on a closed shell (the sandbox killed it); open a new sandbox")
        if self._eof:
            code = await self._exit_code()
            raise ShellDied(
                f"the shell is dead: it exited on its own (exit {code}); open a new sandbox", exit_code=code
            )
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        end = started + max(0.0, min(duration_s, max_wait_s))
        if keystrokes:
            self._on_readable()  # a prompt already here is read now, so that it is not taken for theirs
            self._out.typed()
            if self.view is not None:
                self.view.keys_sent()
            try:
                await asyncio.wait_for(
                    loop.sock_sendall(self._sock, translate_keys(keystrokes).encode()), timeout=max_wait_s
                )
            except TimeoutError:
                raise SandboxTimeout("shell input not consumed within max_wait_s") from None
            except OSError as exc:
                raise SandboxError(f"the shell's connection to the daemon broke: {exc}") from exc
        await settle(
            self._out,
            until=end,
            alive=lambda: self.alive,
            typed=bool(keystrokes),
            idle=self._idle,
            confirm=self.view.waits_alone if self.view is not None else None,
        )
        await asyncio.sleep(0)
        self._on_readable()
        return self._out.take()

    async def close(self) -> None:
        """Kill bash and everything it started; idempotent."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
        try:
            await self._kill_fn()
        finally:
            with contextlib.suppress(OSError):
                self._sock.close()
