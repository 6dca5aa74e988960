"""How many refused calls a tenant may have recorded: a token bucket per tenant.

Why: every refused call (policy ``deny``, a quota's 429) appends an fsync'd ``denied``
record under the audit log's one lock, so a tenant that floods refused calls would take
that lock, the data disk and every other tenant's audit latency with it. Past its bucket, a
refusal is answered 429 ``refusal_rate`` (with ``Retry-After``) *before* any record is
written. Only refusals take tokens: a call that is admitted and runs is never limited here
and always keeps its intent and outcome records.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from runtime.audit.buckets import TenantBuckets
from runtime.errors import RefusalRateExceeded


class RefusalLimiter:
    """``take(tenant)`` before recording a refusal: fine up to ``burst`` at once, then
    ``rate`` per second; past that ``RefusalRateExceeded``. ``burst=0`` turns it off."""

    def __init__(self, *, burst: int = 20, rate: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.burst = burst
        self.rate = rate
        self._buckets = TenantBuckets(burst=burst, rate=rate, clock=clock)
        self.limited = 0  # refusals answered 429 without a record (metrics, tests)

    def take(self, tenant_id: str) -> None:
        if self.burst <= 0:
            return
        wait = self._buckets.take(tenant_id)
        if wait is None:
            return
        self.limited += 1
        raise RefusalRateExceeded(
            f"too many refused calls for this tenant (more than {self.burst} at once, then "
            f"{self.rate:g} per second); slow down", retry_after=wait)
