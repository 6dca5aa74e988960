"""Per-session event bus: monotonic ids, a bounded replay buffer, any number of live subscribers.

SSE and WebSocket streams read from here; the executor's output callback and the agent loop
publish here. Resume works from the replay buffer: a client that was away longer than the
buffer holds receives a `resync` event telling it how many events it missed.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

REPLAY_EVENTS = 2000
SUBSCRIBER_QUEUE = 4096


@dataclass(frozen=True)
class Event:
    id: int
    type: str
    data: dict[str, Any]
    ts: float

    def as_json(self) -> dict[str, Any]:
        """The wire object; `id`, `type` and `ts` are the bus's and no payload can shadow them."""
        return {**self.data, "id": self.id, "type": self.type, "ts": self.ts}


@dataclass
class SessionEventBus:
    session_id: str
    replay: deque[Event] = field(default_factory=lambda: deque(maxlen=REPLAY_EVENTS))
    subscribers: set[asyncio.Queue[Event | None]] = field(default_factory=set)
    next_id: int = 1

    def publish(self, type_: str, **data: Any) -> Event:
        event = Event(id=self.next_id, type=type_, data=data, ts=time.time())
        self.next_id += 1
        self.replay.append(event)
        for queue in list(self.subscribers):
            try:
                queue.put_nowait(event)
            except asyncio.QueueFull:
                # A subscriber that cannot keep up is cut off; it resumes by Last-Event-ID.
                self.subscribers.discard(queue)
                _end_stream(queue)
        return event

    def since(self, last_id: int) -> tuple[list[Event], int]:
        """Events after `last_id` still in the buffer, and how many were lost before them."""
        events = [e for e in self.replay if e.id > last_id]
        first_kept = events[0].id if events else self.next_id
        return events, max(0, first_kept - last_id - 1)

    async def subscribe(self, last_id: int | None = None) -> AsyncGenerator[Event, None]:
        """Replay from `last_id` (None: only new events), then follow live until cancelled."""
        queue: asyncio.Queue[Event | None] = asyncio.Queue(maxsize=SUBSCRIBER_QUEUE)
        self.subscribers.add(queue)
        try:
            seen = self.next_id - 1 if last_id is None else last_id
            if last_id is not None:
                backlog, lost = self.since(last_id)
                if lost:
                    yield Event(id=seen, type="resync", data={"missed": lost}, ts=time.time())
                for event in backlog:
                    seen = event.id
                    yield event
            while True:
                item = await queue.get()
                if item is None:
                    return
                if item.id > seen:
                    seen = item.id
                    yield item
        finally:
            self.subscribers.discard(queue)

    def close(self) -> None:
        for queue in list(self.subscribers):
            _end_stream(queue)
        self.subscribers.clear()


def _end_stream(queue: asyncio.Queue[Event | None]) -> None:
    """Make the subscriber's iterator return at its next read."""
    while not queue.empty():
        queue.get_nowait()
    queue.put_nowait(None)


class EventHub:
    """All sessions' buses; created by the app factory, never at import."""

    def __init__(self) -> None:
        self._buses: dict[str, SessionEventBus] = {}

    def bus(self, session_id: str) -> SessionEventBus:
        bus = self._buses.get(session_id)
        if bus is None:
            bus = self._buses[session_id] = SessionEventBus(session_id)
        return bus

    def drop(self, session_id: str) -> None:
        bus = self._buses.pop(session_id, None)
        if bus is not None:
            bus.close()

    def close(self) -> None:
        for session_id in list(self._buses):
            self.drop(session_id)
