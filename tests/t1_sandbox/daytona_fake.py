"""A local fake of the Daytona HTTP API, for testing the real ``daytona`` SDK without an account.

It answers the endpoints the SDK 0.226 calls for what the Daytona backend uses (paths and JSON shapes taken
from ``daytona_api_client_async`` and ``daytona_toolbox_api_client_async``):

- control plane: ``POST /sandbox`` (create), ``GET /sandbox`` (list, ``labels`` JSON filter, cursor pages),
  ``GET /sandbox/{id}``, ``DELETE /sandbox/{id}``, ``POST /sandbox/{id}/start`` and ``/stop``,
  ``GET /sandbox/{id}/toolbox-proxy-url``;
- toolbox (under ``/toolbox/{id}``): ``GET /work-dir``, ``POST /process/execute``, ``POST /files/bulk-upload``
  (multipart), ``POST /files/bulk-download`` (multipart answer), and the PTY: the websocket
  ``GET /process/pty/create-connect`` (``id``, ``cols``, ``rows``, ``cwd`` in the query, the environment in
  the ``X-Daytona-Pty-Envs~`` subprotocol) and ``DELETE /process/pty/{sessionId}``, answering as the Daytona
  daemon does: a text ``{"type": "control", "status": "connected"}`` frame, the terminal's output as binary
  frames, the keystrokes from any frame, and at the shell's exit a close frame (1000 for exit 0, else 1011)
  whose reason is ``{"exitCode": N}``; the delete kills the shell's process tree (exit 137).

Not a sandbox: a command of ``process/execute`` runs on this host under bubblewrap, with the fake sandbox's
own directories (``/app``, ``/tmp``, ``/logs``, ``/tests``, ``/root``, ``/home``, ``/workspace``) bound from
a temp dir and the host's ``/usr`` and ``/etc`` read-only, as the caller's uid; the PTY's login shell
(``pty_shell``, default ``bash -i -l`` as the daemon's ``$SHELL -i -l``) runs the same way on a host
pseudo-terminal. It isolates nothing that matters for the attack suite (no pid, network or user namespace;
the host's ``/proc``), which is why that suite runs against it only where a test says what it checks.
With ``image_toolchain`` the fake's "image" also holds a Python with pytest and pytest-json-ctrf (T1's
verifier toolchain bound read-only and first on ``PATH``), as a task image that carries its test tools does.
Every request is recorded (`FakeDaytona.requests`) and any route can be made to hang (`FakeDaytona.hang`,
by route name; ``create_answer`` makes the sandbox, then hangs), fail always (`FakeDaytona.fail`) or fail
its next calls (`FakeDaytona.fail_next`, statuses in order, with `FakeDaytona.retry_after` as the
``Retry-After`` header; ``create_made`` makes the sandbox, then answers the status).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import json
import os
import pty
import shutil
import signal
import struct
import subprocess
import tempfile
import termios
import threading
import urllib.parse
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web


@dataclass
class FakePty:
    """One PTY session of a fake sandbox: its shell, the terminal's master side, the websocket."""

    proc: asyncio.subprocess.Process
    master: int
    ws: web.WebSocketResponse
    input: list[bytes] = field(default_factory=list)


def _kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and its descendants, leaves first (as the daemon's PTY kill walks the tree)."""
    children: list[int] = []
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                children += [int(c) for c in fh.read().split()]
    for child in children:
        _kill_tree(child)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _controlling_tty() -> None:  # in the child, before exec: a session whose terminal is the PTY
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


TOP_DIRS = ("app", "tmp", "logs", "tests", "root", "home", "workspace")


@dataclass
class FakeSandbox:
    """One fake sandbox: its API record and its files on the host."""

    record: dict[str, Any]
    root: Path


@dataclass
class FakeDaytona:
    """The fake API, served by aiohttp on a loopback port in a thread of its own (`start`, `stop`)."""

    base: Path
    sandboxes: dict[str, FakeSandbox] = field(default_factory=dict)
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    hang: set[str] = field(default_factory=set)
    fail: dict[str, int] = field(default_factory=dict)
    fail_next: dict[str, list[int]] = field(default_factory=dict)
    retry_after: str | None = None
    pty_shell: tuple[str, ...] = ("bash", "-i", "-l")
    image_toolchain: bool = False
    deleted: list[str] = field(default_factory=list)
    page_size: int = 2
    url: str = ""

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> FakeDaytona:
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        def serve() -> None:
            asyncio.set_event_loop(self._loop)
            self._unhang = asyncio.Event()
            self._procs: set[asyncio.subprocess.Process] = set()
            self._ptys: dict[tuple[str, str], FakePty] = {}
            self._runner = web.AppRunner(self._app(), shutdown_timeout=2)
            self._loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            self._loop.run_until_complete(site.start())
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self.url = f"http://127.0.0.1:{port}"
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        async def shutdown() -> None:
            await self._runner.cleanup()

        def release() -> None:  # hung routes answer, commands and shells still running are killed
            self._unhang.set()
            for proc in list(self._procs):
                _kill_tree(proc.pid)

        self._loop.call_soon_threadsafe(release)
        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        for sb in self.sandboxes.values():
            shutil.rmtree(sb.root, ignore_errors=True)

    # ------------------------------------------------------------------ helpers for tests
    def calls(self, route: str) -> list[Any]:
        """The bodies of the recorded requests to ``route`` (e.g. ``"create"``), in order."""
        return [body for name, _, body in self.requests if name == route]

    def add_sandbox(self, labels: dict[str, str], *, state: str = "started") -> str:
        """Make a sandbox directly (as if another process had created it); returns its id."""
        return self._make({"labels": labels, "cpu": 1, "memory": 1, "disk": 3}, state=state)

    def live(self) -> list[str]:
        """Ids of the sandboxes not deleted."""
        return [i for i, sb in self.sandboxes.items() if sb.record["state"] != "destroyed"]

    # ------------------------------------------------------------------ app
    def _app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024**2, middlewares=[self._middleware])
        r = app.router
        r.add_post("/sandbox", self._create, name="create")
        r.add_get("/sandbox", self._list, name="list")
        r.add_get("/sandbox/{id}", self._get, name="get")
        r.add_delete("/sandbox/{id}", self._delete, name="delete")
        r.add_post("/sandbox/{id}/start", self._start, name="start")
        r.add_post("/sandbox/{id}/stop", self._stop, name="stop")
        r.add_get("/sandbox/{id}/toolbox-proxy-url", self._proxy_url, name="proxy_url")
        r.add_get("/toolbox/{id}/work-dir", self._work_dir, name="work_dir")
        r.add_post("/toolbox/{id}/process/execute", self._execute, name="execute")
        r.add_post("/toolbox/{id}/files/bulk-upload", self._upload, name="upload")
        r.add_post("/toolbox/{id}/files/bulk-download", self._download, name="download")
        r.add_get("/toolbox/{id}/process/pty/create-connect", self._pty_connect, name="pty_connect")
        r.add_delete("/toolbox/{id}/process/pty/{session}", self._pty_delete, name="pty_delete")
        return app

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        route = request.match_info.route.name or "unknown"
        if request.headers.get("Authorization") != "Bearer test-key":
            return web.json_response({"message": "Unauthorized", "statusCode": 401}, status=401)
        if route in self.hang:
            await self._unhang.wait()  # until `stop`: the client must give up first
            return web.json_response({"message": "released", "statusCode": 503}, status=503)
        status = self.fail.get(route)
        if status is None and self.fail_next.get(route):
            status = self.fail_next[route].pop(0)
        if status is None and route == "create" and self.fail_next.get("create_made"):
            status = self.fail_next["create_made"].pop(0)
            body = await request.json()
            self.requests.append(("create", request.path, body))
            self._make(body)  # made, then an error answer: the caller never learns the id
        if status is not None:
            self.requests.append(("refused", route, status))
            headers = {"Retry-After": self.retry_after} if self.retry_after is not None else None
            return web.json_response(
                {"message": f"fake {route} failure", "statusCode": status}, status=status, headers=headers
            )
        return await handler(request)

    def _make(self, body: dict[str, Any], *, state: str = "started") -> str:
        sid = uuid.uuid4().hex[:12]
        root = Path(tempfile.mkdtemp(prefix=f"fake-daytona-{sid}-", dir=self.base))
        for d in TOP_DIRS:
            (root / d).mkdir()
        record = {
            "id": sid,
            "organizationId": "org-test",
            "name": body.get("name") or sid,
            "snapshot": body.get("snapshot"),
            "user": body.get("user") or "daytona",
            "env": body.get("env") or {},
            "labels": body.get("labels") or {},
            "public": bool(body.get("public")),
            "networkBlockAll": bool(body.get("networkBlockAll")),
            "kvm": False,
            "target": body.get("target") or "us",
            "cpu": body.get("cpu") or 1,
            "gpu": body.get("gpu") or 0,
            "memory": body.get("memory") or 1,
            "disk": body.get("disk") or 3,
            "state": state,
            "autoStopInterval": body.get("autoStopInterval"),
            "autoDeleteInterval": body.get("autoDeleteInterval"),
            "toolboxProxyUrl": f"{self.url}/toolbox",
        }
        self.sandboxes[sid] = FakeSandbox(record, root)
        return sid

    def _find(self, request: web.Request) -> FakeSandbox:
        key = request.match_info["id"]
        for sid, sb in self.sandboxes.items():
            if key in (sid, sb.record["name"]) and sb.record["state"] != "destroyed":
                return sb
        raise web.HTTPNotFound(
            text=json.dumps({"message": f"Sandbox {key} not found", "statusCode": 404}),
            content_type="application/json",
        )

    # ------------------------------------------------------------------ control plane
    async def _create(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(("create", request.path, body))
        sid = self._make(body)
        if "create_answer" in self.hang:  # made, but the answer never reaches the client
            await self._unhang.wait()
        return web.json_response(self.sandboxes[sid].record)

    async def _list(self, request: web.Request) -> web.Response:
        labels = json.loads(request.query.get("labels", "{}"))
        self.requests.append(("list", request.path_qs, labels))
        match = [
            sb.record
            for sb in self.sandboxes.values()
            if sb.record["state"] != "destroyed"
            and all(sb.record["labels"].get(k) == v for k, v in labels.items())
        ]
        start = int(request.query.get("cursor", "0"))
        page = match[start : start + self.page_size]
        cursor = str(start + self.page_size) if start + self.page_size < len(match) else None
        return web.json_response({"items": page, "nextCursor": cursor})

    async def _get(self, request: web.Request) -> web.Response:
        self.requests.append(("get", request.path, None))
        return web.json_response(self._find(request).record)

    async def _delete(self, request: web.Request) -> web.Response:
        sb = self._find(request)
        self.requests.append(("delete", request.path, sb.record["id"]))
        sb.record["state"] = "destroyed"
        self.deleted.append(sb.record["id"])
        for (owner, _), session in list(self._ptys.items()):  # a deleted sandbox's shells die with it
            if owner == sb.record["id"]:
                _kill_tree(session.proc.pid)
        shutil.rmtree(sb.root, ignore_errors=True)
        return web.json_response(sb.record)

    async def _start(self, request: web.Request) -> web.Response:
        sb = self._find(request)
        self.requests.append(("start", request.path, None))
        sb.record["state"] = "started"
        return web.json_response(sb.record)

    async def _stop(self, request: web.Request) -> web.Response:
        sb = self._find(request)
        self.requests.append(("stop", request.path, None))
        sb.record["state"] = "stopped"
        return web.json_response(sb.record)

    async def _proxy_url(self, request: web.Request) -> web.Response:
        self._find(request)
        return web.json_response({"url": f"{self.url}/toolbox"})

    # ------------------------------------------------------------------ toolbox
    def _argv(self, sb: FakeSandbox, command: str, cwd: str | None) -> list[str]:
        argv = ["bwrap", "--die-with-parent", "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
        for link in ("bin", "lib", "lib64", "sbin"):
            if Path(f"/{link}").is_symlink():
                argv += ["--symlink", f"usr/{link}", f"/{link}"]
        argv += ["--proc", "/proc", "--dev", "/dev"]
        for d in TOP_DIRS:
            argv += ["--bind", str(sb.root / d), f"/{d}"]
        for key, value in self._image_env().items():
            argv += ["--setenv", key, value]
        if self.image_toolchain:  # an image with python3 and pytest: T1's verifier toolchain, read-only
            from t1_sandbox.local.toolchain import toolchain

            for host, inside in toolchain().binds:
                argv += ["--ro-bind", host, inside]
        argv += ["--chdir", cwd or "/app", "--setenv", "HOME", "/root", "sh", "-c", command]
        return argv

    def _image_env(self) -> dict[str, str]:
        if not self.image_toolchain:
            return {}
        from t1_sandbox.local.toolchain import toolchain

        return dict(toolchain().env)

    async def _work_dir(self, request: web.Request) -> web.Response:
        self._find(request)
        self.requests.append(("work_dir", request.path, None))
        return web.json_response({"dir": "/app"})

    async def _execute(self, request: web.Request) -> web.Response:
        sb = self._find(request)
        body = await request.json()
        self.requests.append(("execute", request.path, body))
        timeout = body.get("timeout") or 10  # the toolbox's documented default
        proc = await asyncio.create_subprocess_exec(
            *self._argv(sb, body["command"], body.get("cwd")),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", **(body.get("envs") or {})},
        )
        self._procs.add(proc)
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return web.json_response({"exitCode": -1, "result": "command timed out"})
        finally:
            self._procs.discard(proc)
        return web.json_response({"exitCode": proc.returncode, "result": out.decode("utf-8", "replace")})

    # ------------------------------------------------------------------ the PTY (the daemon's websocket)
    async def _pty_connect(self, request: web.Request) -> web.StreamResponse:
        sb = self._find(request)
        query = request.query
        sid = query["id"]
        envs: dict[str, str] = {}
        offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")]
        for token in offered:
            if token.startswith("X-Daytona-Pty-Envs~"):
                raw = token.split("~", 1)[1]
                envs = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        cols, rows, cwd = int(query.get("cols", 80)), int(query.get("rows", 24)), query.get("cwd") or "/app"
        self.requests.append(
            ("pty_connect", request.path, {"id": sid, "cols": cols, "rows": rows, "cwd": cwd})
        )
        key = (sb.record["id"], sid)
        if key in self._ptys:
            return web.json_response({"error": f"PTY session with ID '{sid}' already exists"}, status=409)
        ws = web.WebSocketResponse(protocols=("X-Daytona-Pty-Exit-Control",))
        await ws.prepare(request)
        master, slave = pty.openpty()
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/root", "TERM": "xterm-256color", **envs}
        argv = self._argv(sb, "", cwd)[:-3] + list(self.pty_shell)  # bwrap ... --setenv HOME /root <shell>
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=slave, stdout=slave, stderr=slave, env=env, preexec_fn=_controlling_tty
        )
        os.close(slave)
        os.set_blocking(master, False)
        session = FakePty(proc, master, ws)
        self._ptys[key] = session
        self._procs.add(proc)
        await ws.send_str(json.dumps({"type": "control", "status": "connected"}))
        loop = asyncio.get_running_loop()
        out: asyncio.Queue[bytes | None] = asyncio.Queue()

        def readable() -> None:
            try:
                data = os.read(master, 65536)
            except BlockingIOError:
                return
            except OSError:  # EIO: every holder of the terminal is gone
                data = b""
            if not data:
                loop.remove_reader(master)
                out.put_nowait(None)
            else:
                out.put_nowait(data)

        loop.add_reader(master, readable)

        async def pump() -> None:  # terminal -> client, in order; then the exit status in the close frame
            while (data := await out.get()) is not None:
                await ws.send_bytes(data)
            rc = await proc.wait()
            code = 128 - rc if rc < 0 else rc
            reason = json.dumps({"exitCode": code} | ({"exitReason": "non-zero exit"} if code else {}))
            await ws.close(code=1000 if code == 0 else 1011, message=reason.encode())

        async def reaper() -> None:  # the shell exited: drain the terminal a moment, then end the pump
            await proc.wait()
            await asyncio.sleep(0.2)
            with contextlib.suppress(Exception):
                loop.remove_reader(master)
            out.put_nowait(None)

        pumping = asyncio.create_task(pump())
        reaping = asyncio.create_task(reaper())
        try:
            async for msg in ws:
                if msg.type in (web.WSMsgType.BINARY, web.WSMsgType.TEXT):
                    data = msg.data if isinstance(msg.data, bytes) else msg.data.encode()
                    session.input.append(data)
                    with contextlib.suppress(OSError):
                        os.write(master, data)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(pumping), 2)
        finally:
            reaping.cancel()
            pumping.cancel()
            with contextlib.suppress(Exception):
                loop.remove_reader(master)
            if proc.returncode is None:  # the client left: the daemon keeps the session; the fake ends it
                _kill_tree(proc.pid)
                await proc.wait()
            self._procs.discard(proc)
            self._ptys.pop(key, None)
            with contextlib.suppress(OSError):
                os.close(master)
        return ws

    async def _pty_delete(self, request: web.Request) -> web.Response:
        sb = self._find(request)
        sid = request.match_info["session"]
        self.requests.append(("pty_delete", request.path, sid))
        session = self._ptys.get((sb.record["id"], sid))
        if session is None or session.proc.returncode is not None:
            return web.json_response({"error": "PTY session not found"}, status=404)
        _kill_tree(session.proc.pid)
        return web.json_response({"message": "PTY session deleted"})

    async def _drop_pty(self, sid: str) -> None:
        for (_, name), session in list(self._ptys.items()):
            if name == sid:
                await session.ws.close(code=1001, message=b"")  # a dropped connection: no exit status

    def drop_pty(self, sid: str) -> None:
        """Close the websocket of PTY session ``sid`` without an exit status (a lost connection)."""
        asyncio.run_coroutine_threadsafe(self._drop_pty(sid), self._loop).result(10)

    def pty_sessions(self) -> list[str]:
        """Ids of the PTY sessions whose shell still runs."""
        return [sid for (_, sid), s in self._ptys.items() if s.proc.returncode is None]

    def _host(self, sb: FakeSandbox, remote: str) -> Path:
        path = (sb.root / remote.lstrip("/")).resolve()
        if not path.is_relative_to(sb.root.resolve()):
            raise web.HTTPBadRequest(text=f"{remote} is outside the sandbox")
        return path

    async def _upload(self, request: web.Request) -> web.Response:
        sb = self._find(request)
        reader = await request.multipart()
        written = []
        while (part := await reader.next()) is not None:
            if part.name and part.name.endswith(".file"):  # type: ignore[union-attr]
                remote = urllib.parse.unquote(part.filename or "")  # type: ignore[union-attr]
                dest = self._host(sb, remote)
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(await part.read())  # type: ignore[union-attr]
                written.append(remote)
        self.requests.append(("upload", request.path, written))
        return web.json_response({})

    async def _download(self, request: web.Request) -> web.Response:
        sb = self._find(request)
        paths = (await request.json())["paths"]
        self.requests.append(("download", request.path, paths))
        boundary = uuid.uuid4().hex
        chunks = []
        for remote in paths:
            host = self._host(sb, remote)
            name, data, ctype = (
                ("file", host.read_bytes(), "application/octet-stream")
                if host.is_file()
                else (
                    "error",
                    json.dumps({"message": f"{remote}: no such file"}).encode(),
                    "application/json",
                )
            )
            chunks.append(
                f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{remote}"\r\n'
                f"Content-Type: {ctype}\r\n\r\n".encode()
                + data
                + b"\r\n"
            )
        chunks.append(f"--{boundary}--\r\n".encode())
        return web.Response(
            body=b"".join(chunks), headers={"Content-Type": f"multipart/form-data; boundary={boundary}"}
        )
