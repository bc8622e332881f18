"""The launch server of the local sandbox: a small process that forks and execs every ``bwrap`` launch.

Forking the trainer (a process of gigabytes) for every launch costs a copy of its page tables and stalls it;
this process is a bare interpreter (standard library only, run as ``python -I -S spawnd.py``) started once
by `t1_sandbox.local.spawner`, and forks in its place. Its protocol, over the ``SOCK_SEQPACKET`` socket it is
given as its first argument (the control socket):

- each control message carries one descriptor (``SCM_RIGHTS``): the server's end of a ``SOCK_STREAM``
  socket pair, the launch's own connection;
- on that connection the client has sent an 8-byte big-endian length with the child's descriptors attached
  (``fds[i]`` becomes the child's descriptor ``i``: stdin, stdout, stderr, then e.g. bwrap's seccomp pipe),
  then that many bytes of JSON: ``argv`` (``argv[0]`` is the launch's tag), ``executable``, ``cgroup_procs``
  (files the child writes ``0`` to, as root, joining the sandbox's cgroup), ``tty`` (make stdin the
  controlling terminal), ``rlimits`` (``[resource, soft, hard]``), ``uid`` (and gid; groups are dropped)
  and ``env`` (the child's whole environment);
- the server answers one JSON line, ``{"pid": N}`` once the child has exec'd, or ``{"error": "..."}``
  naming the step that failed (the child never ran), and later ``{"exit": code}`` (negative: killed by that
  signal), then closes the connection.

The child runs in a new session (``setsid``) with the default action for every signal (`RESTORED`).
The server is a child subreaper (``PR_SET_CHILD_SUBREAPER``): bwrap exits as soon as the sandbox's pid 1 has
reported the command's status, without waiting for it, so pid 1 is orphaned; it is reparented here, not to
the host's init (which may take seconds to reap it), and reaped with the launches, so no zombie of a sandbox's
uid outlives its launch for long (`Spawner.children` lists what is not reaped yet).
Lifetimes: a connection closed by the client before its child exited SIGKILLs the child's process group
(the launch was abandoned); the control socket's end-of-file (the client process died, even by SIGKILL),
a SIGTERM (the parent-death signal, armed with ``--pdeathsig PPID``) or a change of parent SIGKILLs every
child's group and ends the server. It is single-threaded: the parent-death signal that bwrap's
``--die-with-parent`` arms belongs to the forking thread, which must outlive every child.
"""

from __future__ import annotations

import array
import fcntl
import json
import os
import resource
import selectors
import signal
import socket
import struct
import sys
import termios

HEADER = struct.Struct(">Q")
MAX_FDS = 8
MAX_REQUEST = 64 * 1024 * 1024  # bytes of JSON in one launch request
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
#: Every catchable signal, given back its default action in every child: those this server handles or
#: ignores (as ``subprocess`` restores SIGPIPE and SIGXFSZ), and any the trainer inherited ignored (a job
#: started with ``&`` by a non-interactive shell ignores SIGINT and SIGQUIT), which would stay ignored in the
#: sandbox across exec.
RESTORED = tuple(s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP))


class _Launch:
    """One launch's connection: its request as it arrives, then its child."""

    def __init__(self, conn: socket.socket, size: int, fds: list[int]) -> None:
        self.conn = conn
        self.size = size
        self.fds = fds
        self.body = bytearray()
        self.pid: int | None = None

    def answer(self, message: dict[str, object]) -> None:
        try:
            self.conn.setblocking(True)
            self.conn.sendall(json.dumps(message).encode() + b"\n")
        except OSError:
            pass  # the client is gone; its child (if any) is killed on the connection's end


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _child(request: dict, fds: list[int], report: int) -> None:
    """In the forked child: set up and exec; on failure write ``step: error`` to ``report`` and exit 127."""
    step = "placing the descriptors"
    try:
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 64) for fd in fds]
        for target, fd in enumerate(high):
            os.dup2(fd, target)  # inheritable: the launch's own descriptors
        for path in request["cgroup_procs"]:  # as root, before anything else: bwrap's set-up is charged too
            step = f"joining the sandbox's cgroup ({path})"
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
        step = "starting a new session"
        os.setsid()
        if request["tty"]:
            step = "taking the terminal as controlling terminal"
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        for res, soft, hard in request["rlimits"]:
            step = f"setting resource limit {res} to {soft}/{hard}"
            resource.setrlimit(res, (soft, hard))
        step = f"switching to uid {request['uid']}"
        os.setgroups([])
        os.setgid(request["uid"])
        os.setuid(request["uid"])
        step = "restoring the default signal dispositions"
        for sig in RESTORED:  # ignored here, and an ignored signal stays ignored across exec
            signal.signal(sig, signal.SIG_DFL)
        step = f"executing {request['executable']}"
        os.execve(request["executable"], request["argv"], request["env"])
    except BaseException as exc:  # noqa: BLE001 - everything is reported, nothing may unwind the fork
        try:
            os.write(report, f"{step}: {exc}".encode()[:4000])
        finally:
            os._exit(127)


def _spawn(launch: _Launch) -> None:
    """Fork and exec the launch's child; answer its pid or the step that failed."""
    try:
        request = json.loads(launch.body)
        report_r, report_w = os.pipe2(os.O_CLOEXEC)
    except (ValueError, OSError) as exc:
        launch.answer({"error": f"reading the launch request: {exc}"})
        return
    try:
        pid = os.fork()
    except OSError as exc:
        _close_all([report_r, report_w])
        launch.answer({"error": f"fork: {exc}"})
        return
    if pid == 0:
        os.close(report_r)
        _child(request, launch.fds, report_w)
    os.close(report_w)
    chunks = []
    while chunk := os.read(report_r, 4096):  # end-of-file: the child exec'd (or died)
        chunks.append(chunk)
    os.close(report_r)
    _close_all(launch.fds)
    launch.fds = []
    if chunks:
        os.waitpid(pid, 0)
        launch.answer({"error": b"".join(chunks).decode("utf-8", "replace")})
        return
    launch.pid = pid
    launch.answer({"pid": pid})


def _kill(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass


class Server:
    """The server's state: the control socket, the launches by connection and by child pid."""

    def __init__(self, control: socket.socket, parent: int) -> None:
        self.control = control
        self.parent = parent
        self.by_fd: dict[int, _Launch] = {}
        self.by_pid: dict[int, _Launch] = {}
        self.wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.selector = selectors.DefaultSelector()  # epoll: no FD_SETSIZE bound on launches in flight
        self.selector.register(control.fileno(), selectors.EVENT_READ)
        self.selector.register(self.wake_r, selectors.EVENT_READ)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wake-up byte is written
        signal.signal(signal.SIGTERM, self.stop)
        for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_IGN)

    def stop(self, *_: object) -> None:
        """Kill every child's group and exit (the client is gone)."""
        for pid in list(self.by_pid):
            _kill(pid)
        os._exit(0)

    def run(self) -> None:
        """Serve launches, reap children and watch the parent until the client is gone."""
        while True:
            if os.getppid() != self.parent:
                self.stop()
            for key, _ in self.selector.select(1.0):
                fd = key.fd
                if fd == self.control.fileno():
                    self._accept()
                elif fd in self.by_fd:
                    self._read(self.by_fd[fd])
            self._reap()  # every round, not only on a wake-up byte: no exit goes unreported

    def _accept(self) -> None:
        try:
            data, ancdata, _, _ = self.control.recvmsg(
                1, socket.CMSG_SPACE(4), socket.MSG_CMSG_CLOEXEC | socket.MSG_DONTWAIT
            )
        except BlockingIOError:
            return
        except OSError:
            self.stop()
        if not data:  # end-of-file: the client process is gone
            self.stop()
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds = array.array("i")
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
                for fd in fds:
                    self._open(socket.socket(fileno=fd))

    def _open(self, conn: socket.socket) -> None:
        """Read a new connection's header and descriptors (the client sent them before passing it)."""
        try:
            data, ancdata, _, _ = conn.recvmsg(
                HEADER.size, socket.CMSG_SPACE(4 * MAX_FDS), socket.MSG_CMSG_CLOEXEC | socket.MSG_DONTWAIT
            )
        except OSError:
            conn.close()
            return
        fds = array.array("i")
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
        launch = _Launch(conn, 0, list(fds))
        if len(data) != HEADER.size or (size := HEADER.unpack(data)[0]) > MAX_REQUEST:
            launch.answer({"error": f"the launch request's header is malformed ({len(data)} bytes)"})
            _close_all(launch.fds)
            conn.close()
            return
        launch.size = size
        conn.setblocking(False)
        self.by_fd[conn.fileno()] = launch
        self.selector.register(conn.fileno(), selectors.EVENT_READ)
        self._read(launch)

    def _read(self, launch: _Launch) -> None:
        try:
            data = launch.conn.recv(1 << 20)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if launch.pid is None and data and len(launch.body) < launch.size:
            launch.body += data
            if len(launch.body) == launch.size:
                _spawn(launch)
                if launch.pid is None:
                    self._forget(launch)
                else:
                    self.by_pid[launch.pid] = launch
                    launch.conn.setblocking(False)
            return
        if not data:  # the client dropped the launch: nothing of it may outlive that
            if launch.pid is not None:
                _kill(launch.pid)
            self._forget(launch)

    def _forget(self, launch: _Launch) -> None:
        if self.by_fd.pop(launch.conn.fileno(), None) is not None:
            self.selector.unregister(launch.conn.fileno())
        _close_all(launch.fds)
        launch.conn.close()

    def _reap(self) -> None:
        try:
            while os.read(self.wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            launch = self.by_pid.pop(pid, None)
            if launch is not None:
                launch.answer({"exit": os.waitstatus_to_exitcode(status)})
                self._forget(launch)


def main(argv: list[str]) -> None:
    """``spawnd.py CONTROL_FD PARENT_PID [--pdeathsig]``: serve until the parent is gone."""
    control = socket.socket(fileno=int(argv[0]))
    control.set_inheritable(False)  # given inheritable (pass_fds); no child may hold it
    parent = int(argv[1])
    import ctypes  # noqa: PLC0415 - once, at start-up

    libc = ctypes.CDLL(None, use_errno=True)
    # bwrap leaves the sandbox's pid 1 behind as it exits; as subreaper this server reaps it at once
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    if "--pdeathsig" in argv[2:]:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    server = Server(control, parent)
    if os.getppid() != parent:  # died before the signal was armed
        server.stop()
    server.run()


if __name__ == "__main__":
    main(sys.argv[1:])
