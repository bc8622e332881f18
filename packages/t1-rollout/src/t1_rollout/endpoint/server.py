"""The HTTP server: OpenAI's ``/v1/chat/completions`` and ``/v1/models``, and ``/t1/exec`` into the sandbox.

An aiohttp server on loopback (port chosen by the system). Every request carries a per-trial key
(``Authorization: Bearer <key>``, the ``OPENAI_API_KEY`` the harness was given); the key selects the trial's
`t1_rollout.endpoint.capture.TrialCapture` and sandbox, and a request without a key the server issued is
refused with 401 before its body is read. Keys are 32 random bytes (``secrets.token_urlsafe``) and die with
their trial (`EndpointServer.close_trial`).

``POST /t1/exec`` runs one command in the trial's sandbox (``Sandbox.exec``): the harness's commands reach
the sandbox through it (`t1_rollout.endpoint.sandbox_exec`), never the rollout host.
"""

from __future__ import annotations

import asyncio
import json
import math
import secrets
import socket
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from t1_rollout.endpoint.capture import RequestError, TrialCapture
from t1_rollout.endpoint.chat import error_body, stream_events
from t1_sandbox.base import Sandbox

TRIAL_KEY = web.RequestKey("trial", object)
"""Where the auth middleware leaves the request's trial."""

MAX_BODY_BYTES = 64 * 1024 * 1024
"""Largest request body (bytes): a long conversation with its tool outputs fits many times over."""


@dataclass
class _Trial:
    capture: TrialCapture
    sandbox: Sandbox | None
    exec_timeout_s: float


class EndpointServer:
    """An OpenAI-compatible endpoint for the trials of one event loop, keyed by per-trial keys.

    Use ``async with EndpointServer() as server`` (or `start` / `close`); `open_trial` gives a key.

    Args:
        host: the address to bind (loopback by default: only processes of this host reach it).
        port: the port; 0 = any free port (see `url`).
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self._trials: dict[str, _Trial] = {}
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> EndpointServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def url(self) -> str:
        """The base URL a client is given (``OPENAI_BASE_URL``): ``http://host:port/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def exec_url(self) -> str:
        """The URL of ``/t1/exec`` (``T1_EXEC_URL``), which runs one command in the trial's sandbox."""
        return f"http://{self.host}:{self.port}/t1/exec"

    async def start(self) -> None:
        """Bind and serve; `url` holds the port the system chose."""
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[self._auth])
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/t1/exec", self._exec)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))  # bound here so that the port the system chose is known
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    async def close(self) -> None:
        """Stop serving (open connections are closed); idempotent."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self._trials.clear()

    def open_trial(
        self, capture: TrialCapture, *, sandbox: Sandbox | None = None, exec_timeout_s: float = 60.0
    ) -> str:
        """Register a trial and return its key (the harness's ``OPENAI_API_KEY``).

        Args:
            capture: the trial's capture (engine, TITO session, episode).
            sandbox: the trial's sandbox for ``/t1/exec``; None refuses exec calls (404).
            exec_timeout_s: the longest one exec call may run (seconds); a request may ask for less.
        """
        key = "t1-" + secrets.token_urlsafe(32)
        self._trials[key] = _Trial(capture, sandbox, exec_timeout_s)
        return key

    def close_trial(self, key: str) -> None:
        """Forget a trial's key: its later calls are refused with 401."""
        self._trials.pop(key, None)

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        header = request.headers.get("Authorization", "")
        scheme, _, key = header.partition(" ")
        trial = self._trials.get(key.strip()) if scheme.lower() == "bearer" else None
        if trial is None:
            return web.json_response(
                error_body(
                    "missing or unknown trial key: send 'Authorization: Bearer <OPENAI_API_KEY>' with the "
                    "key T1 gave this trial",
                    kind="invalid_request_error",
                    code="invalid_api_key",
                ),
                status=401,
            )
        request[TRIAL_KEY] = trial
        return await handler(request)

    async def _body(self, request: web.Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RequestError(f"the request body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        return body

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        trial: _Trial = request[TRIAL_KEY]
        try:
            body = await self._body(request)
            answer = await trial.capture.complete(body)
        except RequestError as exc:
            kind = "invalid_request_error" if exc.status == 400 else "episode_over"
            return web.json_response(error_body(str(exc), kind=kind, code=exc.code), status=exc.status)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - an engine failure is the trial's (kept in capture.error)
            return web.json_response(
                error_body(f"{type(exc).__name__}: {exc}", kind="server_error", code="engine_error"),
                status=500,
            )
        if not body.get("stream"):
            return web.json_response(answer)
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        for event in stream_events(answer):
            await response.write(event)
        await response.write_eof()
        return response

    async def _models(self, request: web.Request) -> web.Response:
        trial: _Trial = request[TRIAL_KEY]
        model = {"id": trial.capture.model, "object": "model", "created": 0, "owned_by": "t1"}
        return web.json_response({"object": "list", "data": [model]})

    async def _exec(self, request: web.Request) -> web.Response:
        trial: _Trial = request[TRIAL_KEY]
        if trial.sandbox is None:
            return web.json_response(error_body("this trial has no sandbox", kind="not_found"), status=404)
        if trial.capture.ended.is_set():
            return web.json_response(
                error_body("the episode is over", kind="episode_over", code=trial.capture.episode.finish),
                status=409,
            )
        try:
            body = await self._body(request)
            command, cwd, env, timeout_s = _exec_args(body, trial.exec_timeout_s)
        except RequestError as exc:
            return web.json_response(error_body(str(exc), kind="invalid_request_error"), status=exc.status)
        result = await trial.sandbox.exec(command, timeout_s=timeout_s, cwd=cwd, env=env)
        return web.json_response(
            {
                "stdout": result.stdout,
                "stderr": result.stderr,
                "exit_code": result.exit_code,
                "timed_out": result.timed_out,
                "duration_s": result.duration_s,
            }
        )


def _exec_args(body: dict[str, Any], cap_s: float) -> tuple[str, str | None, dict[str, str] | None, float]:
    """``(command, cwd, env, timeout_s)`` of an exec request; the timeout is at most ``cap_s``."""
    command = body.get("command")
    if not isinstance(command, str) or not command:
        raise RequestError("'command' must be a non-empty string (run with bash -c in the sandbox)")
    cwd = body.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise RequestError("'cwd' must be a string")
    env = body.get("env")
    if env is not None and not (
        isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
    ):
        raise RequestError("'env' must map strings to strings")
    timeout = body.get("timeout_s", cap_s)
    if (
        not isinstance(timeout, int | float)
        or isinstance(timeout, bool)
        or (isinstance(timeout, float) and not math.isfinite(timeout))  # JSON's NaN, Infinity: no deadline
        or timeout <= 0
    ):
        raise RequestError("'timeout_s' must be a positive, finite number of seconds")
    return command, cwd or None, env or None, float(min(timeout, cap_s))  # a huge int stays exact
