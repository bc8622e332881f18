"""Daytona's creates paced under the provider quota: 6 per second against 600 per minute (T1 §7.4).

The rule is the scheduler's (`t1_sandbox.token_bucket.CreationPacer`: a rate bucket and a quota bucket); here
is only its sharing: one pacer per event loop and limits, so that every Daytona create takes a token from it
whichever path made the sandbox (a training batch, ``t1 tasks validate``, evaluation), and no path can exceed
the quota by itself. The defaults are ``RolloutSpec``'s (the only home of those numbers).
"""

from __future__ import annotations

import asyncio

from t1_sandbox.token_bucket import CreationPacer
from t1_spec import RolloutSpec

__all__ = ["CREATION_QUOTA_PER_MIN", "CREATION_RATE_PER_S", "creation_pacer"]

CREATION_RATE_PER_S = float(RolloutSpec.model_fields["creation_rate_per_s"].default)
CREATION_QUOTA_PER_MIN = float(RolloutSpec.model_fields["creation_quota_per_min"].default)

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
