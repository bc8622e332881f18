"""When a refused Daytona create is tried again: HTTP 429 and 5xx, with backoff, inside the start deadline.

A 429 (the provider's rate limit, T1 §7.4: 600 creations per minute) and a 5xx (an API or runner fault) are
transient; any other answer (a bad request, a wrong key, an exhausted quota of sandboxes) is not, and fails
at once. The wait before the next try is the answer's ``Retry-After`` (seconds) when it sends one, else
exponential from 1 s (1, 2, 4, ... capped at 30 s) with jitter in [0.5, 1] of it, so that the trials of a
fleet refused together do not come back together. No try starts unless at least `MIN_ATTEMPT_S` of the
deadline would be left for it: the last refusal then ends the start as an infrastructure failure naming
every answer, never as the agent's 0. The numbers are transport tuning, not recipe settings (the recipe's
``rollout.creation_rate_per_s`` and ``creation_quota_per_min`` pace the creates themselves).
"""

from __future__ import annotations

import random

from t1_sandbox.base import SandboxError, format_seconds

__all__ = [
    "BACKOFF_FIRST_S",
    "BACKOFF_MAX_S",
    "MIN_ATTEMPT_S",
    "refused_error",
    "retry_delay_s",
    "status_of",
    "transient",
]

#: The first backoff, seconds (doubled per refusal).
BACKOFF_FIRST_S = 1.0
#: The longest backoff, seconds (also the most a ``Retry-After`` is waited).
BACKOFF_MAX_S = 30.0
#: Seconds of the start deadline a new try needs at least (the create's request and the wait for ``started``).
MIN_ATTEMPT_S = 2.0


def status_of(exc: BaseException | None) -> int | None:
    """The HTTP status of a Daytona SDK error (``DaytonaError.status_code``); None for a client-side one."""
    code = getattr(exc, "status_code", None)
    return code if isinstance(code, int) else None


def transient(status: int | None) -> bool:
    """Whether a create answered with ``status`` may succeed when tried again (429 or 5xx)."""
    return status is not None and (status == 429 or 500 <= status <= 599)


def _retry_after_s(exc: BaseException | None) -> float | None:
    headers = getattr(exc, "headers", None) or {}
    for key, value in dict(headers).items():
        if str(key).lower() == "retry-after":
            try:
                seconds = float(value)
            except (TypeError, ValueError):
                return None  # an HTTP date: fall back to the exponential backoff
            return max(0.0, seconds)
    return None


def retry_delay_s(exc: BaseException | None, refusals: int, left_s: float) -> float | None:
    """Seconds to wait before trying the create again, or None when it must not be tried again.

    Args:
        exc: the SDK's error of the refused create (its ``status_code`` and ``headers``).
        refusals: how many creates of this start were refused so far, this one included (>= 1).
        left_s: seconds left of the start's deadline.

    Returns:
        The wait (``Retry-After`` capped at `BACKOFF_MAX_S`, else the jittered exponential backoff), or None:
        the status is not transient, or the wait and `MIN_ATTEMPT_S` do not fit in ``left_s``.
    """
    if not transient(status_of(exc)):
        return None
    after = _retry_after_s(exc)
    if after is not None:
        wait = min(after, BACKOFF_MAX_S)
    else:
        wait = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (refusals - 1)) * random.uniform(0.5, 1.0)
    if wait + MIN_ATTEMPT_S > left_s:
        return None
    return wait


def refused_error(last: SandboxError, answers: list[str], timeout_s: float) -> SandboxError:
    """The start's error once no create may be tried again: the last error and every answer, named.

    Args:
        last: the last create's `SandboxError` (its message starts with ``daytona create``).
        answers: each refused create's answer in order (``"HTTP 429"``, ``"HTTP 503"``).
        timeout_s: the start's deadline, seconds.
    """
    return SandboxError(
        f"{last} (create answered {', '.join(answers)} within the start deadline of "
        f"{format_seconds(timeout_s)}: the provider refused, an infrastructure failure, not the agent's)"
    )
