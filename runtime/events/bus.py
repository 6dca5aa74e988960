"""Per-session event bus: monotonic ids, a replay buffer bounded in bytes, live subscribers.

SSE and WebSocket streams (`runtime.api`) read from here; tool calls (`runtime.calls`), the
agent loop and the approvals publish here, each event a typed model (`runtime.events.models`).
It lives below both the API and the agent, so neither reaches up for it. Resume works from
the replay buffer: a client that was away longer than the buffer holds receives a `resync`
event telling it how many events it missed. How much is kept (per session, across the
server, for idle sessions) is `runtime.events.replay`'s.

An event is encoded once, when it is published: that text is what every subscriber is sent
and what the replay accounts for, so what the server holds is what it counts.

While a sub-agent runs (`NESTED_TURN` set, for its task and what it starts), what it and its
calls publish goes out wrapped as `subagent` events naming the parent's call, so a client
never mistakes its `stream_end` for the parent's; approvals and questions stay top-level (a
human answers them where they always appear).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field

from runtime.events.models import Event, Resync, SessionEvent, SubAgentEvent
from runtime.events.replay import (
    ReplayBudget,
    ReplayBuffer,
    ReplayLimits,
    event_cost,
)

SUBSCRIBER_QUEUE = 4096
NESTED_TURN: ContextVar[tuple[str, str] | None] = ContextVar("navi_nested_turn", default=None)
"""(the parent's spawn_agent call id, the sub-agent's turn id) while a sub-agent runs."""
UNNESTED = frozenset({"approval_required", "approval_decided", "question",
                      "question_answered", "process_started", "process_output",
                      "process_exited"})  # a process belongs to the session, not a turn
MIN_SWEEP_S = 0.05


class _Subscriber:
    """A live reader's queue, bounded in events and in bytes (what it has not read yet):
    a reader that does not read would otherwise keep alive events the replay let go."""

    def __init__(self, max_bytes: int) -> None:
        self.queue: asyncio.Queue[Event | None] = asyncio.Queue(maxsize=SUBSCRIBER_QUEUE)
        self.max_bytes = max_bytes
        self.bytes = 0

    def offer(self, event: Event) -> bool:
        cost = event_cost(event)
        if (self.bytes and self.bytes + cost > self.max_bytes) or self.queue.full():
            return False  # (one event of any size fits a reader that is up to date)
        self.queue.put_nowait(event)
        self.bytes += cost
        return True

    async def get(self) -> Event | None:
        item = await self.queue.get()
        if item is not None:
            self.bytes -= event_cost(item)
        return item

    def end(self) -> None:
        """Make the subscriber's iterator return at its next read."""
        while not self.queue.empty():
            self.queue.get_nowait()
        self.bytes = 0
        self.queue.put_nowait(None)


@dataclass(eq=False)
class SessionEventBus:
    session_id: str
    replay: ReplayBuffer
    clock: Callable[[], float] = time.monotonic
    subscribers: set[_Subscriber] = field(default_factory=set)
    next_id: int = 1
    last_event: float = 0.0  # `clock()` when the last event was published

    def __post_init__(self) -> None:
        self.last_event = self.clock()

    def publish(self, body: SessionEvent) -> Event:
        nested = NESTED_TURN.get()
        if nested is not None and body.type not in UNNESTED:
            body = SubAgentEvent(parent_call=nested[0], turn_id=nested[1], event=body.payload())
        event = Event.make(self.next_id, body)
        self.next_id += 1
        self.last_event = self.clock()
        self.replay.append(event)
        for sub in list(self.subscribers):
            if not sub.offer(event):
                # A subscriber that cannot keep up is cut off; it resumes by Last-Event-ID.
                self.subscribers.discard(sub)
                sub.end()
        return event

    def since(self, last_id: int) -> tuple[list[Event], int]:
        """Events after `last_id` still in the buffer, and how many were lost before them."""
        events = [e for e in self.replay if e.id > last_id]
        first_kept = events[0].id if events else self.next_id
        return events, max(0, first_kept - last_id - 1)

    async def subscribe(self, last_id: int | None = None) -> AsyncGenerator[Event, None]:
        """Replay from `last_id` (None: only new events), then follow live until cancelled."""
        sub = _Subscriber(max(self.replay.budget.limits.session_bytes, 64 * 1024))
        self.subscribers.add(sub)
        try:
            seen = self.next_id - 1 if last_id is None else last_id
            if last_id is not None:
                backlog, lost = self.since(last_id)
                if lost:
                    yield Event.make(seen, Resync(missed=lost))
                for event in backlog:
                    seen = event.id
                    yield event
            while True:
                item = await sub.get()
                if item is None:
                    return
                if item.id > seen:
                    seen = item.id
                    yield item
        finally:
            self.subscribers.discard(sub)

    def idle_since(self) -> float | None:
        """`clock()` of the last event when no one watches and something is kept, else None."""
        return None if self.subscribers or not len(self.replay) else self.last_event

    def close(self) -> None:
        for sub in list(self.subscribers):
            sub.end()
        self.subscribers.clear()


class EventHub:
    """All sessions' buses and their shared replay budget; created by the app factory."""

    def __init__(self, limits: ReplayLimits | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.budget = ReplayBudget(limits)
        self.clock = clock
        self._buses: dict[str, SessionEventBus] = {}

    @property
    def limits(self) -> ReplayLimits:
        return self.budget.limits

    def bus(self, session_id: str) -> SessionEventBus:
        bus = self._buses.get(session_id)
        if bus is None:
            bus = self._buses[session_id] = SessionEventBus(
                session_id, self.budget.buffer(), clock=self.clock)
        return bus

    def drop(self, session_id: str) -> None:
        bus = self._buses.pop(session_id, None)
        if bus is not None:
            bus.close()
            self.budget.release(bus.replay)

    def sweep(self) -> int:
        """Empty the replay of sessions idle for `idle_s` (nobody watching, no new event).

        The bus itself stays, so ids keep counting up and a returning client is told what
        it missed. Returns how many buffers were emptied."""
        cutoff = self.clock() - self.limits.idle_s
        emptied = 0
        for bus in self._buses.values():
            since = bus.idle_since()
            if since is not None and since <= cutoff:
                bus.replay.clear()
                emptied += 1
        return emptied

    async def sweep_forever(self) -> None:
        """`sweep` a few times per `idle_s` (at most once a minute) until cancelled."""
        interval = max(MIN_SWEEP_S, min(60.0, self.limits.idle_s / 4))
        while True:
            await asyncio.sleep(interval)
            with contextlib.suppress(Exception):
                self.sweep()

    def start_sweeper(self) -> asyncio.Task[None]:
        return asyncio.create_task(self.sweep_forever(), name="event-replay-sweeper")

    def close(self) -> None:
        for session_id in list(self._buses):
            self.drop(session_id)
