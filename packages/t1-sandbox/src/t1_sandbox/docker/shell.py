r"""``DockerShell``: the trial's persistent interactive bash in a Docker sandbox, on the exec's terminal.

bash runs under the launcher (``t1run.py``) in an exec with a terminal (160 x 40, as Terminus's pane); the
exec's hijacked socket carries keystrokes in and the terminal's output out. The shell is idle when its
prompt (``PS1`` or ``PS2``) has been printed since the last keystrokes and nothing has arrived for 30 ms
twice: each prompt carries an invisible marker (an OSC escape with a per-shell nonce) that is removed from
what the agent reads. A program reading the terminal itself (a REPL, ``cat``) shows no prompt, so ``send``
waits its full ``duration_s`` then, as a tmux pane would.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import secrets
import socket
import time
from collections.abc import Awaitable, Callable

from t1_sandbox.base import SandboxError, SandboxTimeout, Shell, ShellDied, format_seconds
from t1_sandbox.local.shell import translate_keys

__all__ = ["DockerShell", "prompt_env"]


def prompt_env(nonce: str) -> dict[str, str]:
    """``PS1`` / ``PS2`` that show ``$ `` / ``> `` and carry the idle marker of ``nonce``."""
    mark = f"\\[\\e]9;t1-{nonce}\\a\\]"
    return {"PS1": f"{mark}$ ", "PS2": f"{mark}> "}


class DockerShell(Shell):
    """Interactive bash on the terminal of one ``docker exec`` (made by ``DockerSandbox.open_shell``).

    Args:
        sock: the exec's hijacked socket (non-blocking).
        nonce: the marker nonce of its prompts (`prompt_env`).
        exit_code: coroutine giving the exec's exit status once it ended (``None`` when unknown).
        kill: coroutine killing the shell and everything it started.
    """

    _POLL_S = 0.03
    MAX_UNREAD = 2 * 1024 * 1024

    def __init__(
        self,
        sock: socket.socket,
        nonce: str,
        *,
        exit_code: Callable[[], Awaitable[int | None]],
        kill: Callable[[], Awaitable[None]],
    ) -> None:
        self._sock = sock
        self._marker = f"\x1b]9;t1-{nonce}\x07".encode()
        self._exit_code = exit_code
        self._kill_fn = kill
        self._buf = bytearray()
        self._omitted = 0
        self._eof = False
        self._closed = False
        self._prompted = False
        self._last_data = time.monotonic()
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        asyncio.get_running_loop().add_reader(sock.fileno(), self._on_readable)

    @staticmethod
    def new_nonce() -> str:
        """A fresh marker nonce."""
        return secrets.token_hex(8)

    def _on_readable(self) -> None:
        try:
            for _ in range(16):
                data = self._sock.recv(65536)
                if not data:
                    self._eof = True
                    asyncio.get_running_loop().remove_reader(self._sock.fileno())
                    return
                self._last_data = time.monotonic()
                self._buf += data
                if self._marker in self._buf[-(len(data) + len(self._marker)) :]:
                    self._prompted = True
                if len(self._buf) > self.MAX_UNREAD:
                    half = self.MAX_UNREAD // 2
                    cut = len(self._buf) - self.MAX_UNREAD
                    self._omitted += cut
                    del self._buf[half : half + cut]
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
        return self._prompted and time.monotonic() - self._last_data >= self._POLL_S

    async def wait_first_prompt(self, timeout_s: float) -> None:
        """Wait for the first prompt.

        Raises:
            SandboxError: bash exited at start.
            SandboxTimeout: no prompt within ``timeout_s``.
        """
        end = time.monotonic() + timeout_s
        while not self._idle():
            if self._eof:
                raise SandboxError(f"shell exited at start: {bytes(self._buf).decode('utf-8', 'replace')}")
            if time.monotonic() > end:
                raise SandboxTimeout(f"shell showed no prompt within {format_seconds(timeout_s)}")
            await asyncio.sleep(self._POLL_S)
        self._buf.clear()

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
            self._prompted = False
            try:
                await asyncio.wait_for(
                    loop.sock_sendall(self._sock, translate_keys(keystrokes).encode()), timeout=max_wait_s
                )
            except TimeoutError:
                raise SandboxTimeout("shell input not consumed within max_wait_s") from None
            except OSError as exc:
                raise SandboxError(f"the shell's connection to the daemon broke: {exc}") from exc
            await asyncio.sleep(self._POLL_S)
        while time.monotonic() < end and self.alive:
            if self._idle():
                await asyncio.sleep(self._POLL_S)
                if self._idle():
                    break
            await asyncio.sleep(self._POLL_S)
        await asyncio.sleep(0)
        self._on_readable()
        new = bytes(self._buf).replace(self._marker, b"")
        if self._omitted:
            new += f"\n[... {self._omitted} bytes omitted ...]\n".encode()
        self._buf.clear()
        self._omitted = 0
        return self._decoder.decode(new).replace("\r\n", "\n")

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
