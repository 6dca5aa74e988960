"""How many allowed state changes a tenant may make: a token bucket per tenant.

Why: every allowed change (a file written or deleted, a snapshot, a share, a process, a
kernel execute, an E2B call) appends an fsync'd audit record under the audit log's one lock
and may grow the data disk; unmetered, one tenant looping over empty uploads takes that lock,
that disk and every other tenant's latency with it. Past its bucket a change is answered
429 ``change_rate`` with ``Retry-After`` and recorded as a refusal (itself under the
refusal rate, ``runtime.audit.refusals``), so the flood writes a bounded number of records.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from runtime.audit.buckets import TenantBuckets
from runtime.errors import ChangeRateExceeded


class ChangeLimiter:
    """``take(tenant)`` before a state change: fine up to ``burst`` at once, then ``rate`` per
    second; past that ``ChangeRateExceeded``. ``burst=0`` turns it off."""

    def __init__(self, *, burst: int = 60, rate: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.burst = burst
        self.rate = rate
        self._buckets = TenantBuckets(burst=burst, rate=rate, clock=clock)
        self.limited = 0  # changes answered 429 (metrics, tests)

    def take(self, tenant_id: str) -> None:
        if self.burst <= 0:
            return
        wait = self._buckets.take(tenant_id)
        if wait is None:
            return
        self.limited += 1
        raise ChangeRateExceeded(
            f"too many changes for this tenant (more than {self.burst} at once, then "
            f"{self.rate:g} per second); slow down", retry_after=wait)
