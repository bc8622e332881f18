"""What ``test.sh`` printed, kept whole at its two ends: the head and tail capture of the verifier's run.

The sandbox's exec keeps the first 8 MiB of each stream and cuts the rest, so output printed before pytest's
closing line could push that line out of what T1 sees, and with it the check of the report against pytest's
own counts (``t1_reward.check_report``). `capture_command` wraps ``bash /tests/test.sh`` so that its output
keeps its head and its tail, and `inner_deadline` leaves ``test.sh`` a margin before the exec's deadline to
print them. Used by ``t1_rollout.verify.run_verifier``.
"""

from __future__ import annotations

__all__ = ["INNER_TIMEOUT_MARK", "TIMEOUT_EXIT", "capture_command", "inner_deadline"]

#: coreutils ``timeout``'s exit status when the deadline ended the command.
TIMEOUT_EXIT = 124
#: The last line of a capture whose command ran past its inner deadline (with exit status `TIMEOUT_EXIT`).
INNER_TIMEOUT_MARK = "[t1: test.sh ran past the verifier deadline]"


def inner_deadline(timeout_s: float) -> int:
    """Seconds ``test.sh`` gets inside the exec: ``timeout_s`` less 10% (at most 30 s) to print its output.

    Returns:
        Whole seconds, at least 1.
    """
    return max(1, int(timeout_s - min(30.0, timeout_s * 0.1)))


# Reads test.sh's output from stdin: streams its first H bytes at once, keeps its last T, and stops once the
# subshell whose pid the first line names has exited (and its output has drained), so a background process
# that holds the pipe open cannot hold the verifier to its deadline. argv: H T.
_FILTER = r"""
import os, select, sys, time
H, T = int(sys.argv[1]), int(sys.argv[2])
out = sys.stdout.buffer
first = b""
while not first.endswith(b"\n") and len(first) < 64:
    c = os.read(0, 1)
    if not c:
        break
    first += c
pid = int(first.split()[1]) if first.startswith(b"T1PID ") and len(first.split()) == 2 else None
head, tail, dropped, gone = 0, bytearray(), 0, None
def alive():
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass
    return True
while True:
    ready = select.select([0], [], [], 0.2)[0]
    if ready:
        data = os.read(0, 65536)
        if not data:
            break
        if head < H:
            k = min(H - head, len(data))
            out.write(data[:k]); out.flush(); head += k; data = data[k:]
        tail += data
        if len(tail) > T:
            dropped += len(tail) - T; del tail[: len(tail) - T]
    if pid is not None and gone is None and not alive():
        gone = time.monotonic()
    if gone is not None and (not ready or time.monotonic() - gone > 2.0):
        break
if dropped:
    out.write(b"\n[... %d bytes omitted: over the %d-byte head-and-tail cap ...]\n" % (dropped, H + T))
out.write(bytes(tail)); out.flush()
"""


def capture_command(command: str, deadline_s: int, cap: int) -> str:
    """A shell line that runs ``command`` and prints its output's head and tail, about ``cap`` bytes in all.

    The sandbox's own cap keeps only the head of a stream, so a flood printed before pytest's closing line
    would cut that line away, and with it the check of the report against it (``t1_reward.check_report``).
    Here ``command``'s output (stdout and stderr, in order) goes through a pipe, append-only for whatever
    runs in the sandbox, to a filter (`_FILTER`, on the verifier's ``python3``, isolated: ``-I -S``) that
    passes the first ``cap / 2`` bytes through at once and keeps the last ``cap / 2``, printed after a
    ``[... N bytes omitted`` line once ``command`` has exited. ``command`` runs under coreutils ``timeout``
    with ``deadline_s`` (when the image has it), so that its output is still printed when it overruns; the
    line then ends with `INNER_TIMEOUT_MARK` and exits `TIMEOUT_EXIT`. Without ``python3``, ``command``
    streams straight to the exec's output, as before. The exit status is ``command``'s.

    What stays open: the filter runs with the verifier's rights, so a program under test that kills it
    ends the capture there (pytest then dies on its next write: a session without a closing line, refused
    by ``t1_reward.check_report`` when a report exists).
    """
    half = max(cap // 2 - 256, 1024)
    mark = INNER_TIMEOUT_MARK
    inner = (
        f'echo "T1PID $BASHPID"; t=""; command -v timeout >/dev/null 2>&1 && t="timeout -k 5 {deadline_s}"; '
        f's=$SECONDS; $t {command}; rc=$?; if [ -n "$t" ] && [ "$rc" -eq {TIMEOUT_EXIT} ] '
        f'&& [ $((SECONDS - s)) -ge {deadline_s} ]; then echo; echo "{mark}"; fi; exit "$rc"'
    )
    return (
        f"if command -v python3 >/dev/null 2>&1; then ( {inner} ) 2>&1 | python3 -I -S -c {_shq(_FILTER)} "
        f'{half} {half}; exit "${{PIPESTATUS[0]}}"; else {command}; fi'
    )


def _shq(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"
