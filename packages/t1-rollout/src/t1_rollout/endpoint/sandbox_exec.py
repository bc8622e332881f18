"""``t1-sandbox-exec``: the ``docker``-like command that runs an external harness's commands in the sandbox.

Harnesses already know how to run their commands in a container with the ``docker`` command line (``run -d``,
``exec -w DIR -e K=V ID ARGV...``, ``stop``, ``rm``); mini-swe-agent's docker environment, for one, takes
the path of that command as a setting. `write_exec_command` writes a small stdlib-only script that answers
those sub-commands for the trial's sandbox, whatever its backend (local, docker, daytona): ``run`` prints the
trial's sandbox name and starts nothing, ``exec`` sends ``ARGV`` (shell-quoted) to the endpoint's
``/t1/exec`` with the trial's key and prints the command's stdout and stderr with its exit status (124 when
it ran past its deadline, as ``timeout(1)``), ``stop``, ``kill`` and ``rm`` do nothing (T1 reclaims the
sandbox). The script reads ``T1_EXEC_URL`` and ``OPENAI_API_KEY`` from its environment.
"""

from __future__ import annotations

import sys
from pathlib import Path

SANDBOX_NAME = "t1-sandbox"
"""What ``run -d`` prints: the name the harness then passes to ``exec``."""

_SCRIPT = """\
import json, os, shlex, sys, urllib.error, urllib.request

def main(argv):
    if not argv:
        sys.stderr.write("t1-sandbox-exec: a sub-command is needed (run, exec, stop, kill, rm)\\n")
        return 125
    sub, rest = argv[0], argv[1:]
    if sub == "run":
        print(NAME)
        return 0
    if sub in ("stop", "kill", "rm"):
        return 0
    if sub != "exec":
        sys.stderr.write(f"t1-sandbox-exec: {sub!r} is not served (run, exec, stop, kill, rm)\\n")
        return 125
    cwd, env, i = None, {}, 0
    while i < len(rest) and rest[i].startswith("-"):
        flag = rest[i]
        if flag in ("-w", "--workdir"):
            cwd, i = rest[i + 1], i + 2
        elif flag in ("-e", "--env"):
            key, _, value = rest[i + 1].partition("=")
            env[key], i = value, i + 2
        else:
            i += 1  # -i, -t and other flags without a value change nothing here
    if len(rest) < i + 2:
        sys.stderr.write("t1-sandbox-exec: exec needs a container name and a command\\n")
        return 125
    body = {"command": shlex.join(rest[i + 1:]), "cwd": cwd, "env": env or None}
    request = urllib.request.Request(
        os.environ["T1_EXEC_URL"],
        data=json.dumps(body).encode(),
        headers={
            "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
            "Content-Type": "application/json",
        },
    )
    try:
        with urllib.request.urlopen(request) as response:
            result = json.load(response)
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:500]
        sys.stderr.write(f"t1-sandbox-exec: the endpoint refused the command ({exc.code}): {detail!r}\\n")
        return 125
    sys.stdout.write(result["stdout"])
    sys.stdout.flush()
    sys.stderr.write(result["stderr"])
    if result["timed_out"]:
        return 124
    return 137 if result["exit_code"] is None else result["exit_code"]

sys.exit(main(sys.argv[1:]))
"""


def write_exec_command(folder: Path, *, python: str | None = None) -> Path:
    """Write the ``t1-sandbox-exec`` script into ``folder`` (executable) and return its path.

    Args:
        folder: where to write it (created if missing), e.g. the trial's harness folder.
        python: the interpreter of its ``#!`` line; default this process's (the script needs only the
            standard library).
    """
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "t1-sandbox-exec"
    header = f"#!{python or sys.executable}\nNAME = {SANDBOX_NAME!r}\n"
    path.write_text(header + _SCRIPT, encoding="utf-8")
    path.chmod(0o755)
    return path
