"""Per-tenant admission: concurrent executions and executions per minute (in memory).

The Executor asks before deciding anything; a refusal is ``QuotaExceeded(retry_after=s)``
(HTTP 429 with ``Retry-After``). A call beyond ``max_concurrent`` waits, first come first
served, in its tenant's own queue of at most ``queue_depth`` calls (for at most
``MAX_WAIT_S``): one tenant's flood fills only its own queue, then gets 429s. Limits come
from ``PolicyEngine.quotas(tenant name)`` so an edited policy applies to the next call; the
queues and counts are kept by tenant id (``Subject.tenant``). The count is per process:
several supervisors on one data dir each enforce the quota on their share.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Literal

from runtime.errors import QuotaExceeded
from runtime.policy.model import Quotas

WINDOW_S = 60.0
MAX_WAIT_S = 60.0


class QuotaExceededFor(QuotaExceeded):
    """A ``QuotaExceeded`` that also says which quota (for the audit rule id)."""

    def __init__(self, message: str, *, retry_after: int,
                 quota: Literal["max_concurrent", "execs_per_minute", "queue_depth"]) -> None:
        super().__init__(message, retry_after=retry_after, quota=quota)
        self.quota = quota


class QuotaSlot:
    """One admitted execution; ``release()`` (idempotent) frees its concurrency slot;
    ``refund()`` takes its start back out of the rate window (it never ran: refused)."""

    def __init__(self, tracker: QuotaTracker, tenant_id: str, started: float) -> None:
        self._tracker = tracker
        self._tenant_id = tenant_id
        self._started = started
        self._released = False

    def refund(self) -> None:
        starts = self._tracker._starts.get(self._tenant_id)
        with contextlib.suppress(ValueError):
            if starts is not None:
                starts.remove(self._started)

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._tracker._release(self._tenant_id)


class QuotaTracker:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._active: dict[str, int] = {}
        self._starts: dict[str, deque[float]] = {}
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}

    def waiting(self, tenant_id: str) -> int:
        return len(self._waiting.get(tenant_id, ()))

    async def admit(self, tenant_id: str, quotas: Quotas, max_wait_s: float = MAX_WAIT_S
                    ) -> QuotaSlot:
        """Admit one execution, waiting in the tenant's queue while it runs its maximum;
        ``QuotaExceeded`` when the queue is full, the wait too long or the rate spent."""
        if self._active.get(tenant_id, 0) < quotas.max_concurrent and not self.waiting(tenant_id):
            return self.acquire(tenant_id, quotas)
        queue = self._waiting.setdefault(tenant_id, deque())
        if len(queue) >= quotas.queue_depth:
            raise QuotaExceededFor(
                f"tenant has {quotas.max_concurrent} executions running and "
                f"{len(queue)} waiting (max_concurrent, queue_depth)",
                retry_after=1, quota="queue_depth" if quotas.queue_depth else "max_concurrent")
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue.append(turn)
        admitted = False
        try:
            async with asyncio.timeout(max_wait_s):  # not wait_for: on 3.11 it may swallow
                await asyncio.shield(turn)          # a cancel that races the wake-up
            slot = self.acquire(tenant_id, quotas)
            admitted = True
            return slot
        except TimeoutError:
            raise QuotaExceededFor(
                f"waited {max_wait_s:g} s for one of the tenant's {quotas.max_concurrent} "
                "executions to end (max_concurrent)", retry_after=1,
                quota="max_concurrent") from None
        finally:
            queue.remove(turn)
            if not queue:
                self._waiting.pop(tenant_id, None)
            elif not admitted and turn.done():  # woken but gone (cancelled, timed out,
                self._wake_next(tenant_id)     # rate spent): the next in line goes instead

    def active(self, tenant_id: str) -> int:
        return self._active.get(tenant_id, 0)

    def acquire(self, tenant_id: str, quotas: Quotas) -> QuotaSlot:
        """Admit one execution or raise; synchronous, so atomic on the event loop."""
        now = self._clock()
        starts = self._starts.setdefault(tenant_id, deque())
        while starts and now - starts[0] >= WINDOW_S:
            starts.popleft()
        if self._active.get(tenant_id, 0) >= quotas.max_concurrent:
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
        self._active[tenant_id] = self._active.get(tenant_id, 0) + 1
        return QuotaSlot(self, tenant_id, now)

    def _wake_next(self, tenant_id: str) -> None:
        """The first waiter not yet woken may go (it acquires when it runs again)."""
        for turn in self._waiting.get(tenant_id, ()):
            if not turn.done():
                turn.set_result(None)
                return

    def _release(self, tenant_id: str) -> None:
        self._wake_next(tenant_id)
        left = self._active.get(tenant_id, 0) - 1
        if left > 0:
            self._active[tenant_id] = left
        else:
            self._active.pop(tenant_id, None)
            if not self._starts.get(tenant_id):
                self._starts.pop(tenant_id, None)
