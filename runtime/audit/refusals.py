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

from runtime.audit.buckets import TenantLimiter
from runtime.errors import RefusalRateExceeded


class RefusalLimiter(TenantLimiter):
    """``take(tenant)`` before recording a refusal; past the bucket ``RefusalRateExceeded``
    (answered without a record)."""

    error = RefusalRateExceeded
    what = "refused calls"

    def __init__(self, *, burst: int = 20, rate: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(burst=burst, rate=rate, clock=clock)
