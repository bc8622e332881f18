"""A token bucket, and the one pacing rule of sandbox creation built from two of them (T1 §7.4).

`CreationPacer` is that rule: a creation takes a token from a bucket refilled at the creation rate holding
at most one second of creations, then from one refilled at the quota's rate holding the whole per-minute
quota (6 per second under 600 per minute in production). The scheduler paces a batch's first launches with
one (`t1_rollout.scheduler.collect_batch`); a remote provider's client paces its own creates with one shared
per event loop (`t1_sandbox.daytona.pacing`).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable

__all__ = ["CreationPacer", "TokenBucket"]


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


class CreationPacer:
    """Waits until one more sandbox creation fits both the rate and the per-minute quota.

    Args:
        rate_per_s: creations per second (the rate bucket's refill; T1: 6); it holds ``max(1, rate_per_s)``.
        quota_per_min: creations per minute the provider allows (T1: 600); its bucket holds all of them.
        clock: the buckets' time source, seconds (``time.monotonic``; a test passes a manual clock).
        sleep: how a wait is spent (``asyncio.sleep``).

    Raises:
        ValueError: a rate that is not a finite number > 0 or a quota that is not a finite number >= 1
            (`TokenBucket`).
    """

    def __init__(
        self,
        rate_per_s: float,
        quota_per_min: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.rate_per_s = rate_per_s
        self.quota_per_min = quota_per_min
        self._rate = TokenBucket(rate_per_s, capacity=max(1.0, rate_per_s), clock=clock, sleep=sleep)
        self._quota = TokenBucket(quota_per_min / 60.0, capacity=quota_per_min, clock=clock, sleep=sleep)

    async def acquire(self) -> None:
        """Take one creation from both buckets, waiting as long as either needs."""
        await self._rate.acquire()
        await self._quota.acquire()
