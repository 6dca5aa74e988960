"""One turn's events on the session bus: every event carries the turn id; deltas are batched.

Models stream a token at a time; publishing each as its own event would flood the bus
(and its replay buffer) with tiny frames. Text is buffered and published when a batch
reaches `BATCH_CHARS` or `BATCH_S` has passed since the last one, and always before any
other event, so the order of what a client sees is exactly the order things happened. A
timer flushes a batch that waits longer than `BATCH_S` (a model pausing mid-sentence).
"""

from __future__ import annotations

import asyncio
import time
from typing import Literal

from runtime.events import (
    SessionEvent,
    SessionEventBus,
    StreamDelta,
    ThinkingDelta,
    ThinkingEnd,
)

BATCH_CHARS = 96
BATCH_S = 0.05
_DELTA_EVENT = {"thinking": ThinkingDelta, "text": StreamDelta}


class TurnEvents:
    def __init__(self, bus: SessionEventBus, turn_id: str) -> None:
        self.bus = bus
        self.turn_id = turn_id
        self.iteration = 0
        self._kind: Literal["thinking", "text"] | None = None
        self._buffer: list[str] = []
        self._size = 0
        self._last = time.monotonic()
        self.thinking_open = False
        self._timer: asyncio.TimerHandle | None = None

    def emit(self, event: SessionEvent) -> None:
        """Publish `event` (made with this turn's `turn_id`) after any batched text."""
        self.flush()
        self.bus.publish(event)

    def delta(self, kind: Literal["thinking", "text"], text: str) -> None:
        if kind == "thinking":
            self.thinking_open = True
        elif self.thinking_open:
            self.end_thinking()
        if self._kind != kind:
            self.flush()
            self._kind = kind
        self._buffer.append(text)
        self._size += len(text)
        now = time.monotonic()
        if self._size >= BATCH_CHARS or now - self._last >= BATCH_S:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(BATCH_S, self.flush)

    def end_thinking(self) -> None:
        if self.thinking_open:
            self.thinking_open = False
            self.emit(ThinkingEnd(turn_id=self.turn_id, iteration=self.iteration))

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._buffer and self._kind is not None:
            self.bus.publish(_DELTA_EVENT[self._kind](
                turn_id=self.turn_id, iteration=self.iteration, content="".join(self._buffer)))
        self._buffer.clear()
        self._size = 0
        self._last = time.monotonic()
