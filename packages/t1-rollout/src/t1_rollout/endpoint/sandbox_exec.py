"""``t1-sandbox-exec``: the ``docker``-like command that runs an external harness's commands in the sandbox.

Harnesses already know how to run their commands in a container with the ``docker`` command line (``run -d``,
``exec -w DIR -e K=V ID ARGV...``, ``stop``, ``rm``); mini-swe-agent's docker environment, for one, takes
the path of that command as a setting. `write_exec_command` writes a small stdlib-only script that answers
those sub-commands for the trial's sandbox, whatever its backend (local, docker, daytona): ``run`` prints the
trial's sandbox name and starts nothing, ``exec`` sends ``ARGV`` (shell-quoted) to the endpoint's
``/t1/exec`` with the trial's key and prints the command's stdout and stderr with its exit status (124 when
it ran past its deadline, as ``timeout(1)``), ``stop``, ``kill`` and ``rm`` do nothing (T1 reclaims the
sandbox). The script reads ``T1_EXEC_URL`` and ``OPENAI_API_KEY`` from its environment.

``exec`` parses ``docker exec``'s options as docker does (``--flag=value``, ``--flag value``, ``-w/app``,
clustered ``-it``; options end at the first word that is not one, or at ``--``): ``-w/--workdir``,
``-e/--env`` (``NAME`` alone takes ``NAME``'s value from the script's environment, as docker does),
``--env-file``; ``-u/--user``, ``--detach-keys``, ``-i``, ``-t`` and ``--privileged`` are taken and change
nothing: the command runs as the sandbox's agent user whatever user is asked for. ``-d/--detach``, an unknown
option or a missing value exits 125 with one line on stderr, as docker does.
"""

from __future__ import annotations

import sys
from pathlib import Path

SANDBOX_NAME = "t1-sandbox"
"""What ``run -d`` prints: the name the harness then passes to ``exec``."""

_SCRIPT = """\
import json, os, shlex, sys, urllib.error, urllib.request

# docker exec's options: those that take a value, and those that do not (T1 §4.1's harness seam).
VALUED = {"-w": "--workdir", "-e": "--env", "-u": "--user", "--workdir": "--workdir", "--env": "--env",
          "--user": "--user", "--env-file": "--env-file", "--detach-keys": "--detach-keys"}
SWITCHES = {"-i": "--interactive", "-t": "--tty", "--interactive": "--interactive", "--tty": "--tty",
            "--privileged": "--privileged"}
REFUSED = {"-d": "--detach", "--detach": "--detach"}

class _Refused(Exception):
    pass

def _env_file(path, env):
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError as exc:
        raise _Refused(f"--env-file {path!r} cannot be read: {exc.strerror}") from None
    for line in lines:
        if line.strip() and not line.lstrip().startswith("#"):
            _env_item(line, env)

def _env_item(item, env):
    key, eq, value = item.partition("=")
    if not key:
        raise _Refused(f"--env {item!r} has no variable name")
    if eq:
        env[key] = value
    elif key in os.environ:  # docker's -e NAME: the value of NAME where the command line runs
        env[key] = os.environ[key]

def _exec_options(rest):
    # (cwd, env, index of the container name) of exec's options, as docker parses them
    cwd, env, i = None, {}, 0
    while i < len(rest) and rest[i].startswith("-") and rest[i] != "-":
        arg, i = rest[i], i + 1
        if arg == "--":
            break
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            pairs = [(name, value if eq else None)]
        else:  # -it, -w/app, -w=/app: short flags cluster; a valued one takes the rest of the word
            pairs, letters = [], arg[1:]
            while letters:
                name, letters = "-" + letters[0], letters[1:]
                if name in VALUED and letters:
                    pairs.append((name, letters[1:] if letters.startswith("=") else letters))
                    letters = ""
                else:
                    pairs.append((name, None))
        for name, value in pairs:
            if name in REFUSED:
                raise _Refused(f"{name} is not served (T1 waits for every command; run it with '&')")
            if name in SWITCHES:
                continue
            if name not in VALUED:
                raise _Refused(f"unknown flag: {name}")
            if value is None:
                if i >= len(rest):
                    raise _Refused(f"flag needs an argument: {name}")
                value, i = rest[i], i + 1
            long = VALUED[name]
            if long == "--workdir":
                cwd = value
            elif long == "--env":
                _env_item(value, env)
            elif long == "--env-file":
                _env_file(value, env)
            # --user and --detach-keys are taken and change nothing: the command runs as the sandbox's
            # agent user whatever user is asked for (the sandbox holds no other to grant)
    return cwd, env, i

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
    try:
        cwd, env, i = _exec_options(rest)
    except _Refused as exc:
        sys.stderr.write(f"t1-sandbox-exec: exec: {exc}\\n")
        return 125
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
