"""Replay buffers bounded in bytes: per session, across the server, and emptied when idle.

What a session's watchers may replay costs supervisor memory for as long as it is kept, and
what goes into it is (indirectly) a tenant's choice. So each session keeps at most
`session_bytes` of encoded events, all sessions together at most `total_bytes`, and oldest
events go first: within a session its own oldest, across the server the oldest of any
session (`ReplayBudget` finds it with a heap of each buffer's first event). A session with no
watcher and no event for `idle_s` gives its buffer back entirely (`EventHub.sweep`). Whoever
comes back after its events were dropped gets a `resync` event saying how many it missed.

An event's cost is its wire encoding plus `EVENT_OVERHEAD` for the objects around it, so a
flood of tiny events is bounded as well as a few big ones.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from runtime.config import Settings
    from runtime.events.models import Event

MiB = 1024 * 1024
YIELDING = frozenset({"process_output"})
"""Events that give way to every other kind in a session's replay (see `append`)."""
EVENT_OVERHEAD = 288  # bytes beside the wire text: Event, its exec_id, deque slot (measured ~270)


class ReplayLimits(BaseModel):
    """How much event history the server keeps (from `Settings`, see README "Configuration")."""

    model_config = ConfigDict(frozen=True)

    session_bytes: int = Field(8 * MiB, ge=0)
    total_bytes: int = Field(256 * MiB, ge=0)
    idle_s: float = Field(600.0, gt=0)

    @classmethod
    def from_settings(cls, settings: Settings) -> ReplayLimits:
        return cls(session_bytes=settings.events_session_bytes,
                   total_bytes=settings.events_total_bytes, idle_s=settings.events_idle_s)


def event_cost(event: Event) -> int:
    return len(event.wire) + EVENT_OVERHEAD


class ReplayBuffer:
    """One session's retained events, oldest first; every change is accounted to the budget."""

    def __init__(self, budget: ReplayBudget) -> None:
        self.budget = budget
        self._events: deque[tuple[int, Event]] = deque()  # (global order, event)
        self.bytes = 0
        self.yielding_bytes = 0  # of which `YIELDING` events
        self.in_heap = False  # the budget's heap holds an entry for this buffer

    def __len__(self) -> int:
        return len(self._events)

    def __iter__(self) -> Iterator[Event]:
        return (event for _, event in self._events)

    @property
    def head_order(self) -> int | None:
        return self._events[0][0] if self._events else None

    def append(self, event: Event) -> None:
        """Keep `event`, then drop oldest events until this session and the server fit.

        An event larger than the session's whole allowance is not kept (it is still sent
        live): the buffer is emptied instead, so what it holds stays one unbroken run of ids.

        `YIELDING` events (a process's live output, which a tenant's program may produce
        without end) only ever make room by dropping older events of their own kind, and
        are the first to go when another event needs room: they never push an approval, a
        question or a turn's events out (a reader resuming past a dropped one gets the rest
        from the process's output log, by offset).
        """
        cost = event_cost(event)
        limit = self.budget.limits.session_bytes
        yielding = event.type in YIELDING
        if cost > limit:
            if not yielding:
                self.clear()
            return
        while self.bytes + cost > limit and self.yielding_bytes and self._drop_yielding():
            pass
        if yielding and self.bytes + cost > limit:
            return  # kept live only
        self._events.append((self.budget.next_order(), event))
        self.bytes += cost
        if yielding:
            self.yielding_bytes += cost
        self.budget.added(self, cost)
        while self.bytes > limit:
            self.drop_oldest()
        self.budget.trim()

    def drop_oldest(self) -> None:
        _, event = self._events.popleft()
        cost = event_cost(event)
        self.bytes -= cost
        if event.type in YIELDING:
            self.yielding_bytes -= cost
        self.budget.removed(cost)

    def _drop_yielding(self) -> bool:
        """Drop the oldest yielding event; False when there is none."""
        for index, (_, event) in enumerate(self._events):
            if event.type in YIELDING:
                del self._events[index]
                cost = event_cost(event)
                self.bytes -= cost
                self.yielding_bytes -= cost
                self.budget.removed(cost)
                return True
        self.yielding_bytes = 0
        return False

    def clear(self) -> None:
        self._events.clear()
        self.budget.removed(self.bytes)
        self.bytes = 0
        self.yielding_bytes = 0


class ReplayBudget:
    """All replay buffers' bytes together, kept under `limits.total_bytes`."""

    def __init__(self, limits: ReplayLimits | None = None) -> None:
        self.limits = limits or ReplayLimits()
        self.bytes = 0
        self._order = itertools.count()
        self._tiebreak = itertools.count()
        # (order of the buffer's first event when pushed, tiebreak, buffer); an entry may be
        # stale (that event is gone): it is corrected when it comes up, so it never hides an
        # older event. At most one entry per buffer.
        self._heads: list[tuple[int, int, ReplayBuffer]] = []
        self._buffers = 0

    def buffer(self) -> ReplayBuffer:
        self._buffers += 1
        return ReplayBuffer(self)

    def release(self, buffer: ReplayBuffer) -> None:
        """`buffer`'s session is gone: give its bytes back and forget it."""
        buffer.clear()
        self._buffers -= 1
        if len(self._heads) > 2 * self._buffers + 64:  # entries of emptied buffers
            for entry in self._heads:
                entry[2].in_heap = False
            self._heads = [entry for entry in self._heads if len(entry[2])]
            heapq.heapify(self._heads)
            for entry in self._heads:
                entry[2].in_heap = True

    def next_order(self) -> int:
        return next(self._order)

    def added(self, buffer: ReplayBuffer, cost: int) -> None:
        self.bytes += cost
        if not buffer.in_heap:
            self._push(buffer)

    def removed(self, cost: int) -> None:
        self.bytes -= cost

    def trim(self) -> None:
        """Drop the server's oldest events until all buffers fit `total_bytes`."""
        while self.bytes > self.limits.total_bytes and self._heads:
            order, _, buffer = heapq.heappop(self._heads)
            buffer.in_heap = False
            head = buffer.head_order
            if head is None:
                continue
            if head == order:
                buffer.drop_oldest()
            if len(buffer):
                self._push(buffer)

    def _push(self, buffer: ReplayBuffer) -> None:
        head = buffer.head_order
        if head is not None:
            heapq.heappush(self._heads, (head, next(self._tiebreak), buffer))
            buffer.in_heap = True
