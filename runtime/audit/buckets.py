"""A token bucket per tenant: the one mechanism behind the refusal and change limiters
(`TenantLimiter`: the bucket, and the 429 past it).

Each tenant may take up to ``burst`` tokens at once, refilled at ``rate`` per second. Buckets
are kept in memory for at most ``MAX_TENANTS`` tenants; past that, full buckets (which hold
nothing a fresh one would not) are forgotten first.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import ClassVar

from runtime.errors import QuotaExceeded

MAX_TENANTS = 10_000


class TenantBuckets:
    """``take(tenant_id)`` answers None when a token was taken, else the seconds to wait."""

    def __init__(self, *, burst: int, rate: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.burst = burst
        self.rate = rate
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # tenant id -> (tokens, at)
        self._lock = threading.Lock()

    def take(self, tenant_id: str) -> int | None:
        now = self._clock()
        with self._lock:
            tokens, at = self._buckets.get(tenant_id, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) * self.rate)
            if tokens >= 1.0:
                self._buckets[tenant_id] = (tokens - 1.0, now)
                self._forget_full(now)
                return None
            self._buckets[tenant_id] = (tokens, now)
        return max(1, math.ceil((1.0 - tokens) / self.rate)) if self.rate > 0 else 60

    def _forget_full(self, now: float) -> None:
        if len(self._buckets) <= MAX_TENANTS:
            return
        for tenant_id, (tokens, at) in list(self._buckets.items()):
            if tokens + (now - at) * self.rate >= self.burst:
                del self._buckets[tenant_id]


class TenantLimiter:
    """``take(tenant)``: fine up to ``burst`` at once, then ``rate`` per second; past that the
    class's ``error`` (429 with ``Retry-After``), naming ``what`` is counted. ``burst=0``
    turns it off."""

    error: ClassVar[type[QuotaExceeded]] = QuotaExceeded
    what: ClassVar[str] = "calls"

    def __init__(self, *, burst: int, rate: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.burst = burst
        self.rate = rate
        self._buckets = TenantBuckets(burst=burst, rate=rate, clock=clock)
        self.limited = 0  # answered 429 (metrics, tests)

    def take(self, tenant_id: str) -> None:
        if self.burst <= 0:
            return
        wait = self._buckets.take(tenant_id)
        if wait is None:
            return
        self.limited += 1
        raise self.error(
            f"too many {self.what} for this tenant (more than {self.burst} at once, then "
            f"{self.rate:g} per second); slow down", retry_after=wait)
