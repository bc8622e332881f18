"""The kernel's view of a shell's bash from the host: whether bash waits at its prompt, alone.

Used by the shells whose bash is a process of this host (the local shell; the Docker shell when the daemon
runs here) to confirm what bash's prompt marker claims: `t1_sandbox.terminal.settle` ends a wait on the
marker only when `BashView.waits_alone` holds. Everything is read from ``/proc`` (Linux 5.x+): no signal,
no ptrace, nothing bash or the agent can see.

Blocked in ``read(0)`` is not enough: bash's own ``read`` builtin (alone, in a function, ``eval``, ``source``,
a trap or ``PROMPT_COMMAND``) blocks in the same call, as the terminal's foreground with no child, after the
command printed a forged marker. So the shell learns, at its first prompt and before any keystroke of the
agent (`BashView.learn_prompt`), where bash's stack stands when its top-level parser reads a command line:
its stack pointer, its program counter and the return addresses into bash's code just above the stack
pointer (``/proc/<bash>/syscall``, ``/proc/<bash>/mem``). A read anywhere else (a builtin, a deeper nesting,
a new program after ``exec``) differs in the stack pointer or in the caller it returns to; the wait then
runs to its ``duration_s``. So does bash's continuation prompt inside an open quote (its parser reads from
deeper there): slower, never a false "done".
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
#: Bytes of bash's stack read above its stack pointer at the prompt (the parser's return addresses)
_FRAME_BYTES = 512


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
        #: bash's stack pointer, program counter and ``(word index, return address)`` at its first prompt
        self._prompt: tuple[int, int, tuple[tuple[int, int], ...]] | None = None

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

    def _reading(self) -> tuple[int, int, tuple[int, ...], int, int] | None:
        """Where bash blocks in ``read(0)`` as its terminal's foreground with nothing unread, else None.

        Returns ``(sp, pc, stack words above sp, start of bash's code, end of its code)``; None wherever a
        file cannot be read.
        """
        bash = self.bash()
        if bash is None or _READ_NR is None:
            return None
        try:
            with open(f"/proc/{bash}/syscall") as fh:
                call = fh.read().split()
            # "running" while bash runs; else the call's number, its six arguments, sp and pc
            if len(call) != 9 or call[0] != str(_READ_NR) or int(call[1], 16) != 0:
                return None
            with open(f"/proc/{bash}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            if fields[5] != fields[2]:  # tpgid (the terminal's foreground group) is not bash's group
                return None
            tty = os.open(f"/proc/{bash}/fd/0", os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
            try:
                pending = struct.unpack("i", fcntl.ioctl(tty, termios.FIONREAD, b"\0\0\0\0"))[0]
            finally:
                os.close(tty)
            if pending:
                return None
            sp, pc = int(call[7], 16), int(call[8], 16)
            with open(f"/proc/{bash}/mem", "rb", buffering=0) as fh:
                fh.seek(sp)
                raw = fh.read(_FRAME_BYTES)
            words = struct.unpack(f"{len(raw) // 8}Q", raw[: len(raw) // 8 * 8])
            return sp, pc, words, int(fields[23]), int(fields[24])  # startcode, endcode
        except (OSError, ValueError, IndexError, OverflowError):
            return None

    def learn_prompt(self) -> bool:
        """Record where bash's stack stands at its top-level prompt; call before any keystroke of the agent.

        Needs bash blocked reading the terminal, alone (its first prompt). Returns whether it is recorded
        (now or before); until it is, `reads_terminal` is False.
        """
        if self._prompt is None:
            bash, now = self.bash(), self._reading()
            try:
                alone = bash is not None and not _children(bash)
            except (OSError, ValueError):
                alone = False
            if now is not None and alone:
                sp, pc, words, start, end = now
                returns = tuple((i, w) for i, w in enumerate(words) if start <= w < end)
                if returns:  # no return address into bash's code: nothing to tell a builtin's read apart
                    self._prompt = (sp, pc, returns)
        return self._prompt is not None

    def reads_terminal(self) -> bool:
        """Whether bash waits at its top-level prompt, nothing unread, its stack as `learn_prompt` found it.

        bash must be blocked in ``read(0)`` as its terminal's foreground process group.
        ``/proc/<bash>/syscall`` names the call bash is blocked in (``running`` while it runs), so a command
        that prints the prompt marker and goes on is not taken for bash at its prompt; the stack pointer and
        the return addresses above it tell the parser's read of a command line from a ``read`` builtin's.
        False before `learn_prompt` succeeded and wherever a file cannot be read.
        """
        now = self._reading() if self._prompt is not None else None
        if now is None or self._prompt is None:
            return False
        sp, pc, returns = self._prompt
        words = now[2]
        return now[0] == sp and now[1] == pc and all(i < len(words) and words[i] == w for i, w in returns)

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
