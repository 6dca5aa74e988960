"""How many refused calls a tenant may have recorded: a token bucket per tenant.

Why: every refused call (policy ``deny``, a quota's 429) appends an fsync'd ``denied``
record under the audit log's one lock, so a tenant that floods refused calls would take
that lock, the data disk and every other tenant's audit latency with it. Past its bucket, a
refusal is answered 429 ``refusal_rate`` (with ``Retry-After``) *before* any record is
written. Only refusals take tokens: a call that is admitted and runs is never limited here
and always keeps its intent and outcome records.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from runtime.errors import RefusalRateExceeded

MAX_TENANTS = 10_000  # buckets kept; a full bucket is forgotten first (it is the default)


class RefusalLimiter:
    """``take(tenant)`` before recording a refusal: fine up to ``burst`` at once, then
    ``rate`` per second; past that ``RefusalRateExceeded``. ``burst=0`` turns it off."""

    def __init__(self, *, burst: int = 20, rate: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.burst = burst
        self.rate = rate
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # tenant -> (tokens, at)
        self._lock = threading.Lock()
        self.limited = 0  # refusals answered 429 without a record (metrics, tests)

    def take(self, tenant_id: str) -> None:
        if self.burst <= 0:
            return
        now = self._clock()
        with self._lock:
            tokens, at = self._buckets.get(tenant_id, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) * self.rate)
            if tokens >= 1.0:
                self._buckets[tenant_id] = (tokens - 1.0, now)
                self._forget_full(now)
                return
            self._buckets[tenant_id] = (tokens, now)
            self.limited += 1
        wait = math.ceil((1.0 - tokens) / self.rate) if self.rate > 0 else 60
        raise RefusalRateExceeded(
            f"too many refused calls for this tenant (more than {self.burst} at once, then "
            f"{self.rate:g} per second); slow down", retry_after=max(1, wait))

    def _forget_full(self, now: float) -> None:
        if len(self._buckets) <= MAX_TENANTS:
            return
        for tenant_id, (tokens, at) in list(self._buckets.items()):
            if tokens + (now - at) * self.rate >= self.burst:
                del self._buckets[tenant_id]
