"""The kernel's view of a shell's bash from the host: whether bash waits at its prompt, alone.

Used by the shells whose bash is a process of this host (the local shell; the Docker shell when the daemon
runs here) to confirm what bash's prompt marker claims: `t1_sandbox.terminal.settle` ends a wait on the
marker only when `BashView.waits_alone` holds. Everything is read from ``/proc`` (Linux 5.x+): no signal,
no ptrace, nothing bash or the agent can see.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import platform
import struct
import termios

__all__ = ["BashView"]

#: The number of ``read`` in ``/proc/<pid>/syscall`` on this machine's architecture (None: not known here)
_READ_NR = {"x86_64": 0, "aarch64": 63, "arm64": 63}.get(platform.machine())


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/children") as fh:
            out += [int(c) for c in fh.read().split()]
    return out


class BashView:
    """bash as the kernel sees it, found below a launcher process of this host.

    Args:
        launcher: host pid of the process above bash (local: bwrap; Docker: the exec's ``t1run.py``).
        depth: how many levels below ``launcher`` bash is (local: 2, bwrap's init between; Docker: 1). The
            process one level above bash is its reaper: orphans of the agent's commands end up below it.
    """

    def __init__(self, launcher: int, *, depth: int) -> None:
        self.launcher = launcher
        self.depth = depth
        self._bash: int | None = None
        self._reaper: int | None = None
        self._runs_at_keys: int | None = None

    @classmethod
    def below(cls, launcher: int | None, *, tag: str, depth: int) -> BashView | None:
        """The view below ``launcher`` if it is a process of this host whose command line holds ``tag``.

        A pid reported by a daemon on another host (or in another pid namespace) names an unrelated
        process here, or none; the random ``tag`` on the launcher's command line tells ours apart. None: no
        view (the caller keeps its polling rule).
        """
        if not launcher:
            return None
        try:
            with open(f"/proc/{launcher}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            return None
        return cls(launcher, depth=depth) if tag.encode() in argv else None

    def bash(self) -> int | None:
        """Bash's host pid (found once; None while it is not there)."""
        if self._bash is None:
            level, above = [self.launcher], self.launcher
            with contextlib.suppress(OSError, ValueError):
                for _ in range(self.depth):
                    above, level = level[0], _children(level[0])
                    if not level:
                        return None
                self._bash, self._reaper = level[0], above
        return self._bash

    def runs(self) -> int | None:
        """How many times bash has been put on a CPU (``/proc/<bash>/schedstat``); None where unknown."""
        bash = self.bash()
        if bash is None:
            return None
        try:
            with open(f"/proc/{bash}/schedstat") as fh:
                return int(fh.read().split()[2])
        except (OSError, ValueError, IndexError):
            return None

    def keys_sent(self) -> None:
        """Keystrokes are about to go in: a prompt counts only once bash has run after this."""
        self._runs_at_keys = self.runs()

    def reads_terminal(self) -> bool:
        """Whether bash waits in ``read(0)`` as its terminal's foreground process group, nothing unread.

        ``/proc/<bash>/syscall`` names the call bash is blocked in (``running`` while it runs), so a command
        that prints the prompt marker and goes on is not taken for bash at its prompt. False wherever a file
        cannot be read.
        """
        bash = self.bash()
        if bash is None or _READ_NR is None:
            return False
        try:
            with open(f"/proc/{bash}/syscall") as fh:
                call = fh.read().split()
            if len(call) < 2 or call[0] != str(_READ_NR) or int(call[1], 16) != 0:
                return False
            with open(f"/proc/{bash}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            if fields[5] != fields[2]:  # tpgid (the terminal's foreground group) is not bash's group
                return False
            tty = os.open(f"/proc/{bash}/fd/0", os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
            try:
                pending = struct.unpack("i", fcntl.ioctl(tty, termios.FIONREAD, b"\0\0\0\0"))[0]
            finally:
                os.close(tty)
            return pending == 0
        except (OSError, ValueError, IndexError):
            return False

    def waits_alone(self) -> bool:
        """Whether bash ran since the keys and now `reads_terminal`, with no other process alive.

        bash must have been on a CPU since `keys_sent` (a prompt it printed just before the keys is not
        theirs), and no other process may be alive below bash or its reaper (a disowned or double-forked job
        could still write to the terminal). False wherever a file cannot be read: the caller then falls back
        to its polling rule.
        """
        bash = self.bash()
        runs = self.runs()
        if bash is None or runs is None or self._runs_at_keys is None or runs <= self._runs_at_keys:
            return False
        try:
            if _children(bash) or (self._reaper is not None and _children(self._reaper) != [bash]):
                return False
        except (OSError, ValueError):
            return False
        return self.reads_terminal()
