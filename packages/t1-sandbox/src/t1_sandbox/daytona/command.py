"""The shell text a Daytona exec runs, and the parse of what comes back.

Daytona's ``process/execute`` returns stdout and stderr as one string and an exit code, and kills at its own
timeout (10 s when none is sent). The seam wants them apart, a kill of the whole process group at the
deadline, and ``timed_out`` told from an exit status. So every exec is wrapped: the command runs under
``timeout`` (its own process group, TERM then KILL 2 s later), its two streams go to files, and the wrapper
prints one framed line per field (exit status, then stdout and stderr base64-encoded, each capped), so that
undecodable bytes survive the JSON answer. Processes of T1's execs carry ``T1_SANDBOX_TAG`` in their
environment; `kill_tagged_command` kills every process that still does (the agent's leftovers).
"""

from __future__ import annotations

import base64
import math
import re
from dataclasses import dataclass

from t1_sandbox.base import SandboxError
from t1_sandbox.transfer import shell_quote

__all__ = ["STREAM_CAP_BYTES", "Framed", "exec_command", "kill_tagged_command", "parse_framed"]

#: Bytes of each of stdout and stderr an exec returns (the rest is counted in a marker), as the local backend.
STREAM_CAP_BYTES = 8 * 1024**2
KILL_GRACE_S = 2
_MARK = "T1FRAME"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def exec_command(command: str, *, cwd: str, env: dict[str, str], timeout_s: float, tag: str | None) -> str:
    """The POSIX shell text that runs ``bash -c command`` in ``cwd`` with ``env``, for at most ``timeout_s``.

    Args:
        command: the bash command line.
        cwd: absolute working directory inside the sandbox.
        env: variables added to the command's environment.
        timeout_s: seconds before the command's process group gets SIGTERM (SIGKILL 2 s later).
        tag: the value of ``T1_SANDBOX_TAG`` for the command's processes (None: untagged, T1's own).

    Raises:
        SandboxError: an environment variable name that is not a shell name.
    """
    for name in env:
        if not _ENV_NAME.match(name):
            raise SandboxError(f"exec: environment variable name {name!r} is not a shell name")
    assigns = " ".join(f"{k}={shell_quote(v)}" for k, v in env.items())
    if tag is not None:
        assigns = f"T1_SANDBOX_TAG={shell_quote(tag)} {assigns}"
    seconds = max(1, math.ceil(timeout_s))
    cap = STREAM_CAP_BYTES
    return (
        "t1d=$(mktemp -d) || exit 97; "
        f'if ! cd {shell_quote(cwd)} 2>"$t1d/cd"; then '
        f'printf "{_MARK} nocwd %s\\n" "$(base64 -w0 "$t1d/cd")"; '
        'rm -rf "$t1d"; exit 0; fi; '
        f"env {assigns} timeout -k {KILL_GRACE_S} {seconds} bash -c {shell_quote(command)} "
        '>"$t1d/o" 2>"$t1d/e" </dev/null; t1rc=$?; '
        f'printf "{_MARK} rc %s\\n" "$t1rc"; '
        f'for s in o e; do printf "{_MARK} %s %s %s\\n" "$s" "$(wc -c <"$t1d/$s")" '
        f'"$(head -c {cap} "$t1d/$s" | base64 -w0)"; done; rm -rf "$t1d"'
    )


@dataclass(frozen=True)
class Framed:
    """A parsed exec answer: the exit status and both streams, or the reason the cwd was unusable."""

    exit_code: int | None
    stdout: str
    stderr: str
    nocwd: str | None = None


def _stream(total: str, data: str) -> str:
    raw = base64.b64decode(data)
    text = raw.decode("utf-8", "replace")
    dropped = int(total) - len(raw)
    if dropped > 0:
        text += f"\n[t1: {dropped} more bytes of output dropped]\n"
    return text


def parse_framed(result: str, what: str) -> Framed:
    """Read the framed lines `exec_command` printed out of the toolbox's answer.

    Raises:
        SandboxError: the answer has no frame (the wrapper did not run: ``mktemp`` or ``timeout`` missing in
            the image, or the toolbox killed it), with the first 500 characters of what came back.
    """
    fields: dict[str, list[str]] = {}
    for line in result.splitlines():
        if line.startswith(_MARK + " "):
            parts = line.split(" ")
            fields[parts[1]] = parts[2:]
    if "nocwd" in fields:
        why = base64.b64decode(fields["nocwd"][0] if fields["nocwd"] else "").decode("utf-8", "replace")
        return Framed(None, "", "", nocwd=why.strip())
    try:
        rc = int(fields["rc"][0])
        out = _stream(*fields["o"][:2]) if len(fields["o"]) > 1 else ""
        err = _stream(*fields["e"][:2]) if len(fields["e"]) > 1 else ""
    except (KeyError, IndexError, ValueError) as exc:
        raise SandboxError(
            f"{what}: the sandbox's answer carries no exit status (does the image have coreutils' timeout, "
            f"mktemp and base64?): {result[:500]!r}"
        ) from exc
    return Framed(rc, out, err)


def kill_tagged_command(tag: str) -> str:
    """Shell text that SIGKILLs every process whose environment holds ``T1_SANDBOX_TAG=<tag>``, twice.

    A process that cleared its environment (``env -i``) is not found: the verifier's hash checks are the
    line behind this one.
    """
    needle = shell_quote(f"T1_SANDBOX_TAG={tag}")
    return (
        "for t1pass in 1 2; do for e in /proc/[0-9]*/environ; do p=${e#/proc/}; p=${p%/environ}; "
        '[ "$p" = "$$" ] && continue; '
        f'if tr "\\000" "\\n" <"$e" 2>/dev/null | grep -qxF {needle}; then kill -9 "$p" 2>/dev/null; fi; '
        "done; done; exit 0"
    )
