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

from runtime.audit.buckets import TenantLimiter
from runtime.errors import ChangeRateExceeded


class ChangeLimiter(TenantLimiter):
    """``take(tenant)`` before a state change; past the bucket ``ChangeRateExceeded``."""

    error = ChangeRateExceeded
    what = "changes"

    def __init__(self, *, burst: int = 60, rate: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(burst=burst, rate=rate, clock=clock)
