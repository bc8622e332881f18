r"""One terminal for every shell backend: what the agent reads of its persistent bash, and when.

The local (``local/shell.py``), Docker (``docker/shell.py``) and Daytona (``daytona/shell.py``) shells move
bytes in and out of a terminal by their own transport (a host pty, the exec's socket, the toolbox websocket);
everything the agent observes is decided here, once:

- **Keys**: a whole-keystroke tmux key name (``C-c``, ``Enter``) becomes its bytes (`translate_keys`), as
  Terminus sends keys to its tmux pane (harbor_tb.md §3).
- **Prompt detection**: bash's ``PS1`` / ``PS2`` carry an invisible marker (an OSC escape with a per-shell
  nonce, `prompt_env`); `TerminalOutput` removes every marker from what the agent reads and records that a
  prompt arrived since the last keystrokes.
- **Output truncation**: unread output is bounded by ``MAX_UNREAD`` bytes; beyond it the first and the last
  ``MAX_UNREAD / 2`` bytes are kept and one ``[... N bytes omitted ...]`` line stands at the cut, N counting
  the bytes the agent would have read (CR-LF already folded, markers already removed).
- **Keystroke pacing**: after keystrokes, `settle` waits ``POLL_S`` (the shell takes them), then returns once
  the shell's idle sign holds twice ``POLL_S`` apart, or at the deadline.

The idle sign is the backend's: on Docker and Daytona a prompt arrived and nothing else for ``POLL_S``
(`TerminalOutput.idle`); the local shell reads the kernel's view of bash instead (the foreground process
group, a blocked read of the terminal), which no output can imitate.
"""

from __future__ import annotations

import asyncio
import codecs
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


def prompt_marker(nonce: str) -> bytes:
    """The bytes bash prints for the marker of ``nonce`` (OSC 9, which a terminal shows as nothing)."""
    return f"\x1b]9;t1-{nonce}\x07".encode()


def prompt_env(nonce: str) -> dict[str, str]:
    """``PS1`` / ``PS2`` that show ``$ `` / ``> `` and carry the prompt marker of ``nonce``."""
    mark = f"\\[\\e]9;t1-{nonce}\\a\\]"
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
        marker: the prompt marker of this shell's bash (`prompt_marker`); ``None``: its prompts carry none.
        max_unread: bytes of unread output kept (``MAX_UNREAD``); the first and last half of it survive.
    """

    def __init__(self, marker: bytes | None = None, *, max_unread: int = MAX_UNREAD) -> None:
        self.marker = marker
        self.max_unread = max_unread
        self.prompted = False
        self.last_data = time.monotonic()
        self._buf = bytearray()
        self._pending = b""  # a trailing part of a marker or of CR-LF, held until its end arrives
        self._omitted = 0
        self._prompt_at = 0  # offset in the unread output where the last prompt began
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")  # keeps a split character

    def feed(self, data: bytes) -> None:
        """Take one frame of terminal output (never blocks; cuts when over the bound)."""
        if not data:
            return
        self.last_data = time.monotonic()
        data = self._pending + data
        prompt_at = -1  # where, in the cleaned bytes, the last marker stood
        if self.marker is not None and self.marker in data:
            self.prompted = True
            parts = data.split(self.marker)
            data = b"".join(parts)
            prompt_at = len(data) - len(parts[-1])
        keep = _held_back(data, self.marker)
        self._pending = data[len(data) - keep :] if keep else b""
        if prompt_at >= 0:
            self._prompt_at = len(self._buf) + len(data[:prompt_at].replace(b"\r\n", b"\n"))
        self._append(data[: len(data) - keep].replace(b"\r\n", b"\n"))

    def _append(self, data: bytes) -> None:
        self._buf += data
        if len(self._buf) > self.max_unread:
            half = self.max_unread // 2
            cut = len(self._buf) - self.max_unread
            self._omitted += cut
            del self._buf[half : half + cut]

    def typed(self) -> None:
        """Keystrokes went in: a prompt must arrive again before `idle` holds."""
        self.prompted = False

    def idle(self, quiet_s: float = POLL_S) -> bool:
        """A prompt arrived since the last keystrokes and no output for ``quiet_s`` seconds since."""
        return self.prompted and time.monotonic() - self.last_data >= quiet_s

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


def _held_back(data: bytes, marker: bytes | None) -> int:
    """How many trailing bytes of ``data`` may begin a marker or a CR-LF still to be completed."""
    if marker is not None:
        for n in range(min(len(marker) - 1, len(data)), 0, -1):
            if marker.startswith(data[-n:]):
                return n
    return 1 if data.endswith(b"\r") else 0


async def settle(idle: Callable[[], bool], *, until: float, alive: Callable[[], bool], typed: bool) -> None:
    """Keystroke pacing: wait for the shell to take keys and go idle, at most until ``until``.

    After keystrokes (``typed``) waits ``POLL_S`` first; then returns as soon as ``idle()`` holds twice
    ``POLL_S`` apart, when ``alive()`` turns false, or at ``until`` (a ``time.monotonic`` instant).
    """
    if typed:
        await asyncio.sleep(POLL_S)
    while time.monotonic() < until and alive():
        if idle():
            await asyncio.sleep(POLL_S)
            if idle():
                return
        await asyncio.sleep(POLL_S)
