"""The HTTP calls of the SGLang client (standard library): JSON in, JSON or text out, each with a deadline.

Only urllib is used, so joining running servers needs no dependency beyond the standard library. Every
failure is an `EngineError` naming the URL: an infrastructure failure, never the agent's.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from t1_rollout.engine.base import EngineError

__all__ = ["call"]


def call(
    base_url: str,
    path: str,
    payload: Mapping[str, Any] | None = None,
    *,
    timeout_s: float,
    method: str | None = None,
) -> Any:
    """One request to an SGLang server; POST with a JSON body when ``payload`` is given, else GET.

    Args:
        base_url: the server, e.g. ``"http://10.0.0.5:30000"`` (no trailing slash).
        path: the endpoint, e.g. ``"/generate"``.
        payload: the JSON body; None sends a GET (or ``method``) without a body.
        timeout_s: deadline of the whole call (connect and read), seconds.
        method: overrides the HTTP method (``"POST"`` for a body-less POST).

    Returns:
        The decoded JSON answer; the text for a non-JSON answer (``/flush_cache`` answers text); None for
        an empty body.

    Raises:
        EngineError: the server is unreachable, did not answer within ``timeout_s``, or answered a non-2xx
            status (its first 500 bytes are quoted).
    """
    url = base_url + path
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(
        url,
        data=data,
        headers={"Content-Type": "application/json"} if data is not None else {},
        method=method or ("POST" if data is not None else "GET"),
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:500].decode(errors="replace")
        raise EngineError(f"SGLang {url} answered HTTP {exc.code}: {detail}") from exc
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise EngineError(f"SGLang {url} unreachable within {timeout_s:g} s: {exc}") from exc
    if not body:
        return None
    try:
        return json.loads(body)
    except json.JSONDecodeError:
        return body.decode(errors="replace")
