"""``LocalShell``: the trial's persistent interactive bash on a pseudo-terminal inside a local sandbox."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import pty
import struct
import termios
import time
from collections.abc import Callable

from t1_sandbox.base import SandboxError, SandboxTimeout, Shell, ShellDied, format_seconds
from t1_sandbox.bash_view import BashView
from t1_sandbox.local.process import killpg
from t1_sandbox.local.spawner import SpawnedProcess
from t1_sandbox.terminal import MAX_UNREAD, POLL_S, TerminalOutput, settle, translate_keys

__all__ = ["LocalShell", "open_pty"]


def open_pty() -> tuple[int, int]:
    """A pseudo-terminal ``(master, slave)``: 160 x 40, non-blocking master, output not CR-LF translated."""
    master, slave = pty.openpty()
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))  # Terminus: 160 x 40
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.ONLCR  # no \r\n translation on output
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    os.set_blocking(master, False)
    return master, slave


class LocalShell(Shell):
    r"""Interactive bash on a pseudo-terminal inside the sandbox (Terminus's tmux pane, without tmux).

    bash owns the terminal as controlling tty (job control; ``"\x03"`` interrupts the foreground job). A
    command is done the moment bash's prompt arrives with no job running and the kernel confirms that bash
    has run since the keys and now waits in ``read(0)`` at its top-level prompt, as the terminal's
    foreground with nothing unread (`t1_sandbox.terminal.settle`; no timer on that path). Otherwise the
    polling rule holds: idle when no keystroke waits to be read, bash is the terminal's foreground process
    group and bash is blocked reading the terminal at its top-level prompt (not in its ``read`` builtin:
    `t1_sandbox.bash_view`), twice in a row ``POLL_S`` apart. What the agent reads (the bound, the omitted
    line, the prompt marker removed) is `t1_sandbox.terminal`'s.

    Args:
        proc: the launcher of bash (bwrap).
        master, slave: the terminal's two ends (`open_pty`).
        nonce: the prompt-marker nonce of bash's ``PS1`` / ``PS2`` (`t1_sandbox.terminal.prompt_env`).
        kill: kills what the launcher left (bwrap's pid 1) after the launcher's group.
    """

    MAX_UNREAD = MAX_UNREAD

    def __init__(
        self,
        proc: SpawnedProcess,
        master: int,
        slave: int,
        *,
        nonce: str | None = None,
        kill: Callable[[], None] | None = None,
    ) -> None:
        self._proc = proc
        self._kill_fn = kill
        self._master = master
        self._slave = slave
        self._out = TerminalOutput(nonce)
        self._view = BashView(proc.pid, depth=2)
        self._closed = False
        asyncio.get_running_loop().add_reader(master, self._on_readable)

    async def wait_first_prompt(self, timeout_s: float) -> None:
        """Wait until bash waits for its first command, then drop what it printed before its prompt.

        Raises:
            SandboxError: bash exited at start (with what it printed).
            SandboxTimeout: no prompt within ``timeout_s``.
        """
        end = time.monotonic() + timeout_s
        while not await self._idle_now():
            if not self.alive:
                raise SandboxError(f"shell exited at start: {self._out.seen()}")
            if time.monotonic() > end:
                self._kill()
                raise SandboxTimeout(f"shell showed no prompt within {format_seconds(timeout_s)}")
            await asyncio.sleep(POLL_S)
        # no keystroke of the agent yet: bash reads at its top-level prompt; not learnt (a /proc file not
        # readable) leaves every wait to its duration, never to a false prompt
        self._view.learn_prompt()
        self._on_readable()
        self._out.drop_before_prompt()

    def _on_readable(self) -> None:
        # Bounded per call so that a flood (`yes`) cannot starve the event loop.
        try:
            for _ in range(16):
                data = os.read(self._master, 65536)
                if not data:
                    break
                self._out.feed(data)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:  # EIO: the other side is gone
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._master)

    @property
    def alive(self) -> bool:
        """Whether bash is still running."""
        return not self._closed and self._proc.returncode is None

    def _find_bash(self) -> int | None:
        return self._view.bash()  # bwrap (host) -> bwrap init (pid 1 inside) -> bash

    def _idle_once(self) -> bool:
        """The polling rule's sign, at the top-level prompt only (`BashView.reads_terminal`)."""
        return self._bash_reads() and self._view.reads_terminal()

    def _bash_reads(self) -> bool:
        """Whether bash is blocked reading the terminal as its foreground, nothing unread (anywhere in it)."""
        bash = self._find_bash()
        if bash is None:
            return False
        try:
            pending = struct.unpack("i", fcntl.ioctl(self._slave, termios.FIONREAD, b"\0\0\0\0"))[0]
            with open(f"/proc/{bash}/stat") as fh:
                pgid = int(fh.read().rsplit(")", 1)[1].split()[2])
            with open(f"/proc/{bash}/wchan") as fh:
                wchan = fh.read()
            foreground = os.tcgetpgrp(self._master)
        except OSError:
            return False
        # wchan reads "0" where kernel symbols are hidden; then the other two signs decide alone
        blocked_on_tty = wchan in ("wait_woken", "n_tty_read", "", "0")
        return pending == 0 and foreground == pgid and blocked_on_tty

    async def _idle_now(self) -> bool:
        """At the first prompt (nothing learnt yet): bash reads the terminal, twice ``POLL_S`` apart."""
        if not self._bash_reads():
            return False
        await asyncio.sleep(POLL_S)
        return self._bash_reads()

    async def send(self, keystrokes: str, *, duration_s: float, max_wait_s: float) -> str:
        """Type ``keystrokes``; wait up to ``min(duration_s, max_wait_s)`` s or until idle; return new output.

        Raises:
            ShellDied: bash exited on its own before this call (``exit``, ``set -e``, Ctrl-D: the agent's
                doing; the output it left is returned by the call during which it exited).
            SandboxError: the shell was closed (killed by the sandbox), or its host-side launcher was killed
                by a signal (nothing in the sandbox can reach it: infrastructure).
        """
        if self._closed:
            raise SandboxError("send on a closed shell (the sandbox killed it); open a new sandbox")
        code = self._proc.returncode
        if code is not None and code < 0:
            raise SandboxError(
                f"the shell's launcher (host pid {self._proc.pid}) was killed by signal {-code}, outside the "
                "sandbox: an infrastructure failure (host OOM killer, an operator), not the agent's doing"
            )
        if not self.alive:
            raise ShellDied(
                f"the shell is dead: it exited on its own (exit {self._proc.returncode}); open a new sandbox",
                exit_code=self._proc.returncode,
            )
        started = time.monotonic()
        end = started + max(0.0, min(duration_s, max_wait_s))
        if keystrokes:
            # a prompt bash printed before these keys is read now, so that it is not taken for theirs
            self._on_readable()
            self._out.typed()
            self._view.keys_sent()
            data = translate_keys(keystrokes).encode()
            while data:
                try:
                    n = os.write(self._master, data)
                    data = data[n:]
                except BlockingIOError:
                    if time.monotonic() - started > max_wait_s:
                        raise SandboxTimeout("shell input not consumed within max_wait_s") from None
                    await asyncio.sleep(POLL_S)
        await settle(
            self._out,
            until=end,
            alive=lambda: self.alive,
            typed=bool(keystrokes),
            idle=self._idle_once,
            confirm=self._view.waits_alone,
        )
        await asyncio.sleep(0)  # let the reader drain what is pending
        self._on_readable()
        return self._out.take()

    def _kill(self) -> None:
        if self._closed:
            return
        self._closed = True
        killpg(self._proc.pid)
        if self._kill_fn is not None:  # bwrap's pid 1 can outlive a launcher killed during its set-up
            with contextlib.suppress(SandboxError):  # a survivor of SIGKILL is reported by close
                self._kill_fn()
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(self._master)
        for fd in (self._master, self._slave):
            with contextlib.suppress(OSError):
                os.close(fd)

    async def close(self) -> None:
        """Kill bash and everything in its pid namespace; idempotent."""
        self._kill()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._proc.wait(), timeout=5)
