"""Sandbox creation paced under the provider quota: 6 per second against 600 per minute (T1 §7.4).

Two of the scheduler's token buckets (`t1_sandbox.token_bucket.TokenBucket`), as `collect_batch` uses them: one
refilled at ``creation_rate_per_s`` holding at most one second of creations, one at the quota's rate holding
the whole per-minute quota. Every Daytona create takes a token from both, whichever path made the sandbox
(a training batch, ``t1 tasks validate``, evaluation), so no path can exceed the quota by itself. The defaults
are ``RolloutSpec``'s (the only home of those numbers).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from t1_sandbox.token_bucket import TokenBucket
from t1_spec import RolloutSpec

__all__ = ["CREATION_QUOTA_PER_MIN", "CREATION_RATE_PER_S", "CreationPacer", "creation_pacer"]

CREATION_RATE_PER_S = float(RolloutSpec.model_fields["creation_rate_per_s"].default)
CREATION_QUOTA_PER_MIN = float(RolloutSpec.model_fields["creation_quota_per_min"].default)


class CreationPacer:
    """Waits until one more sandbox creation fits both the rate and the per-minute quota.

    Args:
        rate_per_s: creations per second (the rate bucket's refill; T1: 6).
        quota_per_min: creations per minute the provider allows (T1: 600).
        clock, sleep: the buckets' time source and wait (a test passes a manual clock).

    Raises:
        ValueError: a rate that is not > 0 or a quota below 1 (`TokenBucket`).
    """

    def __init__(
        self,
        rate_per_s: float = CREATION_RATE_PER_S,
        quota_per_min: float = CREATION_QUOTA_PER_MIN,
        **clocks: Callable[..., float] | Callable[[float], Awaitable[None]],
    ) -> None:
        self.rate_per_s = rate_per_s
        self.quota_per_min = quota_per_min
        self._rate = TokenBucket(rate_per_s, capacity=max(1.0, rate_per_s), **clocks)  # type: ignore[arg-type]
        self._quota = TokenBucket(quota_per_min / 60.0, capacity=quota_per_min, **clocks)  # type: ignore[arg-type]

    async def acquire(self) -> None:
        """Take one creation from both buckets, waiting as long as either needs."""
        await self._rate.acquire()
        await self._quota.acquire()


_PACERS: dict[int, tuple[asyncio.AbstractEventLoop, CreationPacer]] = {}


def creation_pacer(
    rate_per_s: float = CREATION_RATE_PER_S, quota_per_min: float = CREATION_QUOTA_PER_MIN
) -> CreationPacer:
    """The pacer shared by every Daytona sandbox of the running event loop with these limits.

    One per loop, because a bucket's lock belongs to the loop that first waits on it; a closed loop's pacer
    is dropped.
    """
    loop = asyncio.get_running_loop()
    for key, (other, _) in list(_PACERS.items()):
        if other.is_closed():
            del _PACERS[key]
    key = hash((id(loop), rate_per_s, quota_per_min))
    if key not in _PACERS or _PACERS[key][0] is not loop:
        _PACERS[key] = (loop, CreationPacer(rate_per_s, quota_per_min))
    return _PACERS[key][1]
