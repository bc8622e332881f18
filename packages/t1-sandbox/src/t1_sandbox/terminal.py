r"""One terminal for every shell backend: what the agent reads of its persistent bash, and when.

The local (``local/shell.py``), Docker (``docker/shell.py``) and Daytona (``daytona/shell.py``) shells move
bytes in and out of a terminal by their own transport (a host pty, the exec's socket, the toolbox websocket);
everything the agent observes is decided here, once:

- **Keys**: a whole-keystroke tmux key name (``C-c``, ``Enter``) becomes its bytes (`translate_keys`), as
  Terminus sends keys to its tmux pane (harbor_tb.md §3).
- **Prompt detection**: bash's ``PS1`` / ``PS2`` carry an invisible marker (an OSC escape with a per-shell
  nonce and bash's count of its jobs, `prompt_env`); `TerminalOutput` removes every marker from what the
  agent reads and records that a prompt arrived since the last keystrokes, with that count.
- **Output truncation**: unread output is bounded by ``MAX_UNREAD`` bytes; beyond it the first and the last
  ``MAX_UNREAD / 2`` bytes are kept and one ``[... N bytes omitted ...]`` line stands at the cut, N counting
  the bytes the agent would have read (CR-LF already folded, markers already removed).
- **Completion and keystroke pacing** (`settle`): after keystrokes, a command is done the moment bash's
  prompt comes back with no job of its own left running and the kernel confirms it (`t1_sandbox.bash_view`:
  bash ran since the keys, waits in ``read(0)`` at its top-level prompt, as found at its first prompt, as
  the terminal's foreground with nothing unread, and no other process is alive in the shell's tree); no
  timer runs on that path. Otherwise (a background job, a program or bash's own ``read`` builtin reading
  the terminal, no prompt, or a backend with no view of bash's process: Daytona, and Docker with a daemon
  on another host) the rule is the polling one: the shell's idle sign twice ``POLL_S`` apart, or the
  deadline.

The idle sign is the backend's: with no view of bash, a prompt arrived and nothing else for ``POLL_S``
(`TerminalOutput.idle`), which a command that prints the marker itself can imitate (its nonce is in
``$PS1``); with a view (local; Docker with the daemon on this host) the kernel's view of bash must agree
(the foreground process group, a blocked read of the terminal from bash's top-level prompt), which no
output, nor bash's ``read`` builtin after a printed marker, can imitate.
"""

from __future__ import annotations

import asyncio
import codecs
import re
import secrets
import time
from collections.abc import Callable

__all__ = [
    "MAX_UNREAD",
    "POLL_S",
    "TerminalOutput",
    "new_nonce",
    "omitted_line",
    "prompt_env",
    "prompt_marker",
    "settle",
    "translate_keys",
]

#: Seconds between two looks at the shell's idle sign, and the wait after keystrokes.
POLL_S = 0.03
#: Bytes of unread output kept between two reads (the first and last half of it).
MAX_UNREAD = 2 * 1024 * 1024

# tmux key names that Terminus-style agents send as whole keystrokes (harbor_tb.md §3)
_KEY_NAMES = {"Enter": "\n", "Escape": "\x1b", "Tab": "\t", "BSpace": "\x7f", "Space": " "}


def translate_keys(keystrokes: str) -> str:
    """Map a whole-keystroke tmux key name (``C-c``, ``Enter``, ``Escape``) to its bytes; else verbatim."""
    if (
        len(keystrokes) == 3
        and keystrokes.startswith("C-")
        and keystrokes[2].isascii()
        and keystrokes[2].isalpha()
    ):
        return chr(ord(keystrokes[2].lower()) - ord("a") + 1)
    return _KEY_NAMES.get(keystrokes, keystrokes)


def new_nonce() -> str:
    """A fresh prompt-marker nonce: 16 hex digits."""
    return secrets.token_hex(8)


def prompt_marker(nonce: str, jobs: int = 0) -> bytes:
    """The bytes bash prints for the marker of ``nonce`` at a prompt with ``jobs`` jobs (OSC 9: invisible)."""
    return f"\x1b]9;t1-{nonce};{jobs}\x07".encode()


def prompt_env(nonce: str) -> dict[str, str]:
    """``PS1`` / ``PS2`` that show ``$ `` / ``> `` and carry the marker of ``nonce`` and bash's job count."""
    mark = f"\\[\\e]9;t1-{nonce};\\j\\a\\]"
    return {"PS1": f"{mark}$ ", "PS2": f"{mark}> "}


def omitted_line(n_bytes: int) -> bytes:
    """The line that stands where ``n_bytes`` of output were cut."""
    return f"\n[... {n_bytes} bytes omitted ...]\n".encode()


class TerminalOutput:
    """The unread output of one shell's terminal, as the agent will read it.

    Frames go in through `feed` as they arrive (any split); `take` hands out what arrived since the last
    `take`. CR-LF is folded to LF and prompt markers are removed as bytes arrive (a marker or CR-LF split
    between frames is held back until its end comes), so the bound, the cut and the omitted count all apply
    to the text the agent reads.

    Args:
        nonce: the prompt-marker nonce of this shell's bash (`prompt_env`); ``None``: its prompts carry none.
        max_unread: bytes of unread output kept (``MAX_UNREAD``); the first and last half of it survive.
    """

    def __init__(self, nonce: str | None = None, *, max_unread: int = MAX_UNREAD) -> None:
        self.max_unread = max_unread
        self.prompted = False
        #: bash's count of its jobs at the last prompt (``\j``), ``None`` before the first
        self.jobs: int | None = None
        self.last_data = time.monotonic()
        self._head = f"\x1b]9;t1-{nonce};".encode() if nonce is not None else None
        self._marker = re.compile(re.escape(self._head) + rb"(\d{1,9})\x07") if self._head else None
        self._buf = bytearray()
        self._pending = b""  # a trailing part of a marker or of CR-LF, held until its end arrives
        self._omitted = 0
        self._prompt_at = 0  # offset in the unread output where the last prompt began
        self._arrived = asyncio.Event()  # set by every frame; `settle` waits on it instead of a timer
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")  # keeps a split character

    def feed(self, data: bytes) -> None:
        """Take one frame of terminal output (never blocks; cuts when over the bound)."""
        if not data:
            return
        self.last_data = time.monotonic()
        data = self._pending + data
        prompt_at = -1  # where, in the cleaned bytes, the last marker stood
        if self._marker is not None and self._head in data:
            marks = list(self._marker.finditer(data))
            if marks:
                self.prompted = True
                self.jobs = int(marks[-1].group(1))
                prompt_at = marks[-1].start() - sum(m.end() - m.start() for m in marks[:-1])
                data = self._marker.sub(b"", data)
        keep = self._held_back(data)
        self._pending = data[len(data) - keep :] if keep else b""
        if prompt_at >= 0:
            self._prompt_at = len(self._buf) + len(data[:prompt_at].replace(b"\r\n", b"\n"))
        self._append(data[: len(data) - keep].replace(b"\r\n", b"\n"))
        self._arrived.set()

    def _held_back(self, data: bytes) -> int:
        """How many trailing bytes of ``data`` may begin a marker or a CR-LF still to be completed."""
        head = self._head
        if head is not None:
            at = data.rfind(b"\x1b", max(0, len(data) - len(head) - 10))
            if at >= 0:
                tail = data[at:]
                if head.startswith(tail) or (tail.startswith(head) and tail[len(head) :].isdigit()):
                    return len(tail)
        return 1 if data.endswith(b"\r") else 0

    def _append(self, data: bytes) -> None:
        self._buf += data
        if len(self._buf) > self.max_unread:
            half = self.max_unread // 2
            cut = len(self._buf) - self.max_unread
            self._omitted += cut
            del self._buf[half : half + cut]

    def typed(self) -> None:
        """Keystrokes went in: a prompt must arrive again before `idle` or `at_prompt` holds."""
        self.prompted = False

    def idle(self, quiet_s: float = POLL_S) -> bool:
        """A prompt arrived since the last keystrokes and no output for ``quiet_s`` seconds since."""
        return self.prompted and time.monotonic() - self.last_data >= quiet_s

    def at_prompt(self) -> bool:
        """A prompt arrived since the last keystrokes and bash had no job of its own running then."""
        return self.prompted and self.jobs == 0

    async def output_within(self, seconds: float) -> bool:
        """Wait until a frame arrives (True) or ``seconds`` pass (False).

        A frame fed since the previous wait returned counts as arrived (each return clears the flag).
        """
        if not self._arrived.is_set():
            try:
                await asyncio.wait_for(self._arrived.wait(), max(0.0, seconds))
            except TimeoutError:
                return False
        self._arrived.clear()
        return True

    def seen(self) -> str:
        """The unread output as text, without taking it (for error messages)."""
        return bytes(self._buf + self._pending).decode("utf-8", "replace")

    def drop_before_prompt(self) -> None:
        """Forget the unread output before the last prompt (what a shell printed before its first one).

        The prompt itself stays, so that the first read shows it before the first command's echo, as every
        later read ends with the prompt the next command is typed at.
        """
        if self._omitted:  # the prompt's offset went with the cut: keep nothing of that start
            self._buf.clear()
        else:
            del self._buf[: min(self._prompt_at, len(self._buf))]
        self._omitted = 0
        self._prompt_at = 0

    def take(self) -> str:
        """The output since the last `take`: head, the omitted line at the cut, tail; then empty.

        A trailing CR goes out now; a trailing part of a marker waits for the next frame (it is either
        a prompt still arriving or output that the next frame shows).
        """
        if self._pending == b"\r":
            self._append(self._pending)
            self._pending = b""
        new = bytes(self._buf)
        if self._omitted:
            cut = self.max_unread // 2
            new = new[:cut] + omitted_line(self._omitted) + new[cut:]
        self._buf.clear()
        self._omitted = 0
        self._prompt_at = 0
        return self._decoder.decode(new)


#: First and last wait between two looks at a kernel confirmation that has not come yet (bash printed its
#: prompt and is about to read the terminal; or the marker was printed by the agent's command)
_CONFIRM_FIRST_S, _CONFIRM_MAX_S = 0.0002, POLL_S


async def settle(
    out: TerminalOutput,
    *,
    until: float,
    alive: Callable[[], bool],
    typed: bool,
    idle: Callable[[], bool],
    confirm: Callable[[], bool] | None = None,
) -> None:
    """Wait until the command the keystrokes started is done, at most until ``until`` (one agent turn).

    After keystrokes (``typed``) it returns the moment `TerminalOutput.at_prompt` holds and ``confirm()``
    (the backend's kernel-side check that bash waits at its prompt, alone: `t1_sandbox.bash_view`) agrees:
    each arriving frame wakes it, no timer. Meanwhile, and always without keystrokes or a ``confirm``, the
    polling rule runs unchanged: ``POLL_S`` after the keys, then done once ``idle()`` holds twice ``POLL_S``
    apart. It also returns when ``alive()`` turns false or at ``until`` (a ``time.monotonic`` instant).
    Without ``confirm`` (no view of bash's process) the marker alone never ends a wait: what the agent's
    command can print is no proof, and output of a job bash no longer counts could still be on its way.
    """
    backoff = _CONFIRM_FIRST_S
    by_prompt = typed and confirm is not None

    async def nap(seconds: float) -> bool:
        """Sleep ``seconds``, but return True as soon as the command is done by the prompt rule."""
        nonlocal backoff
        end = time.monotonic() + seconds
        while by_prompt:
            assert confirm is not None
            if out.at_prompt():
                if confirm():
                    return True
                # marker seen, bash not yet (or not) reading the terminal: look again soon, less often
                await asyncio.sleep(min(backoff, max(0.0, end - time.monotonic())))
                backoff = min(2 * backoff, _CONFIRM_MAX_S)
            elif not await out.output_within(end - time.monotonic()):
                return out.at_prompt() and confirm()
            if time.monotonic() >= end:
                return out.at_prompt() and confirm()
        await asyncio.sleep(seconds)
        return False

    if typed and await nap(POLL_S):
        return
    while time.monotonic() < until and alive():
        if idle():
            if await nap(POLL_S):
                return
            if idle():
                return
        if await nap(POLL_S):
            return
