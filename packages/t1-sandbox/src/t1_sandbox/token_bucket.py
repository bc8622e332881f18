"""A token bucket: the pacing of sandbox creation under a provider's rate and quota (T1 §7.4).

The scheduler paces first launches with one (6 per second under a quota of 600 per minute in production), and
a remote provider's client paces its own API calls with another (`t1_sandbox.daytona.pacing`).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable

__all__ = ["TokenBucket"]


class TokenBucket:
    """A token bucket: ``rate`` tokens per second, at most ``capacity`` stored.

    Args:
        rate: refill rate, tokens per second (> 0).
        capacity: bucket size, tokens (>= 1); the bucket starts full.
        clock: the time source, seconds (``time.monotonic``; a test passes a manual clock).
        sleep: how a wait is spent (``asyncio.sleep``; a test passes one that advances its clock).

    Raises:
        ValueError: for a rate that is not a finite number > 0 or a capacity that is not finite and >= 1.
    """

    def __init__(
        self,
        rate: float,
        capacity: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if not (math.isfinite(rate) and math.isfinite(capacity)) or rate <= 0 or capacity < 1:
            raise ValueError(
                f"token bucket needs rate > 0 and capacity >= 1, got rate={rate}, capacity={capacity}"
            )
        self.rate = rate
        self.capacity = capacity
        self._clock = clock
        self._sleep = sleep
        self._tokens = capacity
        self._stamp = clock()
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        """Wait until one token is available and take it."""
        async with self._lock:
            while True:
                now = self._clock()
                self._tokens = min(self.capacity, self._tokens + (now - self._stamp) * self.rate)
                self._stamp = now
                if self._tokens >= 1:
                    self._tokens -= 1
                    return
                await self._sleep((1 - self._tokens) / self.rate)
