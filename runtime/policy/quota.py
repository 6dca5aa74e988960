"""Per-tenant admission: concurrent executions and executions per minute (in memory).

The Executor asks before deciding anything; a refusal is ``QuotaExceeded(retry_after=s)``
(HTTP 429 with ``Retry-After``). Limits come from ``PolicyEngine.quotas(tenant)`` so an
edited policy applies to the next call. The count is per process: several supervisors on
one data dir each enforce the quota on their own share.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from typing import Literal

from runtime.errors import QuotaExceeded
from runtime.policy.model import Quotas

WINDOW_S = 60.0


class QuotaExceededFor(QuotaExceeded):
    """A ``QuotaExceeded`` that also says which quota (for the audit rule id)."""

    def __init__(self, message: str, *, retry_after: int,
                 quota: Literal["max_concurrent", "execs_per_minute"]) -> None:
        super().__init__(message, retry_after=retry_after, quota=quota)
        self.quota = quota


class QuotaSlot:
    """One admitted execution; ``release()`` (idempotent) frees its concurrency slot."""

    def __init__(self, tracker: QuotaTracker, tenant: str) -> None:
        self._tracker = tracker
        self._tenant = tenant
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._tracker._release(self._tenant)


class QuotaTracker:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._active: dict[str, int] = {}
        self._starts: dict[str, deque[float]] = {}

    def active(self, tenant: str) -> int:
        return self._active.get(tenant, 0)

    def acquire(self, tenant: str, quotas: Quotas) -> QuotaSlot:
        """Admit one execution or raise; synchronous, so atomic on the event loop."""
        now = self._clock()
        starts = self._starts.setdefault(tenant, deque())
        while starts and now - starts[0] >= WINDOW_S:
            starts.popleft()
        if self._active.get(tenant, 0) >= quotas.max_concurrent:
            raise QuotaExceededFor(
                f"tenant has {quotas.max_concurrent} executions running (max_concurrent)",
                retry_after=1, quota="max_concurrent",
            )
        if len(starts) >= quotas.execs_per_minute:
            wait = max(1, math.ceil(WINDOW_S - (now - starts[0])))
            raise QuotaExceededFor(
                f"tenant started {quotas.execs_per_minute} executions in the last minute "
                "(execs_per_minute)", retry_after=wait, quota="execs_per_minute",
            )
        starts.append(now)
        self._active[tenant] = self._active.get(tenant, 0) + 1
        return QuotaSlot(self, tenant)

    def _release(self, tenant: str) -> None:
        left = self._active.get(tenant, 0) - 1
        if left > 0:
            self._active[tenant] = left
        else:
            self._active.pop(tenant, None)
            if not self._starts.get(tenant):
                self._starts.pop(tenant, None)
