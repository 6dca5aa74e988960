"""How many allowed state changes a tenant may make: a token bucket per tenant.

Why: every allowed change (a file written or deleted, a snapshot, a share, a process, a
kernel execute, an E2B call) appends an fsync'd audit record under the audit log's one lock
and may grow the data disk; unmetered, one tenant looping over empty uploads takes that lock,
that disk and every other tenant's latency with it. Past its bucket a change is answered
429 ``change_rate`` with ``Retry-After`` and recorded as a refusal (itself under the
refusal rate, ``runtime.audit.refusals``), so the flood writes a bounded number of records.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from runtime.errors import ChangeRateExceeded

MAX_TENANTS = 10_000  # buckets kept; a full bucket is forgotten first (it is the default)


class ChangeLimiter:
    """``take(tenant)`` before a state change: fine up to ``burst`` at once, then ``rate`` per
    second; past that ``ChangeRateExceeded``. ``burst=0`` turns it off."""

    def __init__(self, *, burst: int = 60, rate: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.burst = burst
        self.rate = rate
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # tenant -> (tokens, at)
        self._lock = threading.Lock()
        self.limited = 0  # changes answered 429 (metrics, tests)

    def take(self, tenant: str) -> None:
        if self.burst <= 0:
            return
        now = self._clock()
        with self._lock:
            tokens, at = self._buckets.get(tenant, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) * self.rate)
            if tokens >= 1.0:
                self._buckets[tenant] = (tokens - 1.0, now)
                self._forget_full(now)
                return
            self._buckets[tenant] = (tokens, now)
            self.limited += 1
        wait = math.ceil((1.0 - tokens) / self.rate)
        raise ChangeRateExceeded(
            f"too many changes for this tenant (more than {self.burst} at once, then "
            f"{self.rate:g} per second); slow down", retry_after=max(1, wait))

    def _forget_full(self, now: float) -> None:
        if len(self._buckets) <= MAX_TENANTS:
            return
        for tenant, (tokens, at) in list(self._buckets.items()):
            if tokens + (now - at) * self.rate >= self.burst:
                del self._buckets[tenant]
