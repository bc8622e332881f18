"""The launcher every Docker sandbox process starts under; it runs inside the container, never on the host.

It is copied into the verifier toolchain volume and run by the toolchain's Python as the container's root
(``docker exec --user 0``), isolated (``python3 -I``: no ``PYTHON*`` variable, no user site, no script folder
on the module path, so nothing the agent wrote is imported as root), standard library only. Modes
(``argv[1]``):

- ``init``: the container's pid 1; reaps every orphan, forever.
- ``run TAG UID GID CPU_S CWD SESSION -- ARGV...``: become a child subreaper (``PR_SET_CHILD_SUBREAPER``), so
  that every process the command starts stays below this launcher even after a double fork; write this
  launcher's pid to ``/run/t1/TAG``; fork the command as ``UID:GID`` with no supplementary groups (CPU_S: its
  ``RLIMIT_CPU``, ``-`` for none; SESSION ``1``: a new session, ``0``: keep the terminal's, for the shell);
  when the command exits, kill everything it left running and exit with its status (``128 + n`` when killed
  by signal ``n``). On SIGTERM (the host's deadline) everything below the launcher is killed at once.

A working directory that cannot be entered exits 125 with ``t1run: cwd`` on stderr, so the host tells it
from the command's own failure. The command's environment is the exec's, but for ``LD_LIBRARY_PATH``: the
exec's is empty (this launcher, root, loads no library the agent left in a folder the image's names) and the
command gets the one of ``T1_RUN_LD_LIBRARY_PATH`` (the interpreter finds its library through its own
relative run path).
"""

import ctypes
import os
import resource
import signal
import sys
import time
import warnings  # noqa: F401 - os.execvpe imports it lazily, after the drop to a uid that cannot read it

PR_SET_CHILD_SUBREAPER = 36


def _reap_forever() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        try:
            os.wait()
        except ChildProcessError:
            time.sleep(1.0)
        except InterruptedError:
            continue


def _children_map() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def _kill_below(root: int) -> None:
    """SIGKILL every process below ``root`` (stopped first, so none forks while the tree is walked)."""
    for _ in range(50):
        tree = _children_map()
        found, todo = [], list(tree.get(root, []))
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo += tree.get(pid, [])
        if not found:
            return
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in found:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break


def _run(argv: list[str]) -> int:
    tag, uid, gid, cpu_s, cwd, session = argv[:6]
    command = argv[7:]  # argv[6] is "--"
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    me = os.getpid()
    with open(f"/run/t1/{tag}", "w") as fh:
        fh.write(str(me))
    env = dict(os.environ)
    # the command's own LD_LIBRARY_PATH (launch.py): the exec's is empty, so that this root process loaded
    # no library from a folder the agent can write
    library_path = env.pop("T1_RUN_LD_LIBRARY_PATH", "")
    env.pop("LD_LIBRARY_PATH", None)
    if library_path:
        env["LD_LIBRARY_PATH"] = library_path

    def on_term(signum: int, frame: object) -> None:
        _kill_below(me)
        os._exit(137)

    signal.signal(signal.SIGTERM, on_term)
    child = os.fork()
    if child == 0:
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            if session == "1":
                os.setsid()
            os.setgroups([])
            os.setgid(int(gid))
            os.setuid(int(uid))
            if cpu_s != "-":
                limit = max(1, int(float(cpu_s) + 0.999))
                resource.setrlimit(resource.RLIMIT_CPU, (limit, limit))
            try:
                os.chdir(cwd)
            except OSError as exc:
                os.write(2, f"t1run: cwd {cwd}: {exc.strerror}\n".encode())
                os._exit(125)
            os.execvpe(command[0], command, env)
        except OSError as exc:
            os.write(2, f"t1run: cannot run {command[0]}: {exc.strerror}\n".encode())
            os._exit(127)
    status = 0
    while True:
        try:
            pid, raw = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if pid == child:
            status = os.waitstatus_to_exitcode(raw)
            break
    _kill_below(me)  # background jobs die with the command, as in a fresh pid namespace
    try:
        os.unlink(f"/run/t1/{tag}")
    except OSError:
        pass
    return 128 - status if status < 0 else status


def main() -> int:
    """Dispatch on the mode (the module docstring)."""
    if sys.argv[1] == "init":
        _reap_forever()
    return _run(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
