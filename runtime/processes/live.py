"""One running process, from its started container to its recorded end.

Its output is read on a thread of its own (the attach socket blocks), written to its
``OutputLog`` there, and handed to the event loop, where it wakes waiters and followers and
is published as ``process_output`` events, coalesced: at most one event per process every
``COALESCE_S``, at most ``EVENT_MAX`` bytes each (what did not fit is in the log). The stream
ends when the container does; then the exit state is read and ``ended`` runs the owner's
end-of-process work (record, audit, event, removal) once.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

from runtime.events import ProcessOutputEvent, SessionEventBus
from runtime.logging import get_logger
from runtime.processes.container import ProcessContainers
from runtime.processes.models import MAX_ANSWER, OutputPiece, ProcessRecord, Stream
from runtime.processes.outlog import OutputLog, utf8_cut
from runtime.sandbox.docker import attach

log = get_logger(__name__)

COALESCE_S = 0.05
EVENT_MAX = 64 * 1024
FOLLOW_QUEUE = 1024
STREAMS: dict[int, Stream] = {attach.STDOUT: "stdout", attach.STDERR: "stderr"}


def _pump(sock: socket.socket, outlog: OutputLog,
          arrived: Callable[[int, bytes, Stream], None]) -> None:
    """Read Docker's multiplexed frames until EOF; each payload to the log, then the loop."""
    try:
        for kind, piece in attach.frames(sock):
            stream = STREAMS.get(kind, "stdout")
            arrived(outlog.append(piece, stream), piece, stream)
    except (OSError, ValueError) as exc:  # we shut the socket down (detach, close)
        log.debug("process_stream_closed", error=str(exc))


class LiveProcess:
    """A process whose container runs; made by the service, which owns its end."""

    def __init__(self, record: ProcessRecord, container: str, attached: Any,
                 outlog: OutputLog, bus: SessionEventBus) -> None:
        self.record = record
        self.container = container
        self.attached = attached
        self.outlog = outlog
        self.bus = bus
        self.ending: str | None = None  # why we are ending it (stopped, lifetime, ...)
        self.done = asyncio.get_running_loop().create_future()  # ended and recorded
        self.gone = asyncio.get_running_loop().create_future()  # and its container removed
        self.detached = False
        self.stdin_open = True  # our attach socket's write side (closed: EOF for the program)
        self.tasks: list[asyncio.Future[Any]] = []
        self.closers: list[Callable[[], Awaitable[object]]] = []  # run after it ended
        self._changed = asyncio.Event()
        self._followers: set[asyncio.Queue[OutputPiece | None]] = set()
        self._pending = bytearray()
        self._pending_at = 0  # offset of ``_pending``'s first byte
        self._flush: asyncio.TimerHandle | None = None
        self._input_lock = threading.Lock()
        self.pump: asyncio.Future[None] | None = None

    @property
    def id(self) -> str:
        return self.record.id

    # -- output ---------------------------------------------------------------------------

    def start_pump(self) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()

        def arrived(offset: int, data: bytes, stream: Stream) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody listens
                loop.call_soon_threadsafe(self._arrived, offset, data, stream)

        self.pump = attach.in_thread(_pump, attach.raw_socket(self.attached), self.outlog,
                                     arrived, name=f"navi-proc-{self.id[-6:]}")
        return self.pump

    def _arrived(self, offset: int, data: bytes, stream: Stream) -> None:
        if not self._pending:
            self._pending_at = offset
        self._pending += data
        self._changed.set()
        piece = OutputPiece(offset=offset, data=data, stream=stream)
        for queue in list(self._followers):
            try:
                queue.put_nowait(piece)
            except asyncio.QueueFull:  # a follower that does not read: cut off
                self._followers.discard(queue)
        if self._flush is None:
            self._flush = asyncio.get_running_loop().call_later(COALESCE_S, self.flush)

    def flush(self, *, final: bool = False) -> None:
        """Publish what arrived since the last event (its newest ``EVENT_MAX`` bytes)."""
        self._flush = None
        data, start = bytes(self._pending), self._pending_at
        if not data:
            return
        if len(data) > EVENT_MAX:  # the rest is in the log
            skip = len(data) - EVENT_MAX
            while skip < len(data) and data[skip] & 0xC0 == 0x80:
                skip += 1
            data, start = data[skip:], start + skip
        keep = len(data) if final else utf8_cut(data)
        sent, held = data[:keep], data[keep:]
        self._pending = bytearray(held)
        self._pending_at = start + keep
        if sent:
            self.bus.publish(ProcessOutputEvent(
                process_id=self.id, data=sent.decode("utf-8", "replace"), offset=start,
                next=start + len(sent)))
        if held and not final and self._flush is None:
            self._flush = asyncio.get_running_loop().call_later(COALESCE_S, self.flush)

    async def changed(self, timeout_s: float) -> None:
        """Wait until output arrives or the process ends (or ``timeout_s``)."""
        self._changed.clear()
        waiter = asyncio.ensure_future(self._changed.wait())
        try:
            await asyncio.wait({waiter, self.done}, timeout=timeout_s,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()

    async def follow(self, since: int) -> AsyncIterator[OutputPiece]:
        """The log from ``since``, then live pieces, until the process has ended."""
        queue: asyncio.Queue[OutputPiece | None] = asyncio.Queue(maxsize=FOLLOW_QUEUE)
        self._followers.add(queue)
        try:
            reached = since
            while True:  # what the log holds already, each part with its stream
                parts = await asyncio.to_thread(self.outlog.pieces, reached, MAX_ANSWER,
                                                complete=True)
                if not parts:
                    break
                for offset, data, stream in parts:
                    yield OutputPiece(offset=offset, data=data, stream=cast(Stream, stream))
                    reached = offset + len(data)
            while not (self.done.done() and queue.empty()):
                getter = asyncio.ensure_future(queue.get())
                await asyncio.wait({getter, self.done}, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    getter.cancel()
                    continue
                piece = getter.result()
                if piece is None or self._followers.isdisjoint({queue}):
                    return
                end = piece.offset + len(piece.data)
                if end <= reached:
                    continue
                if piece.offset < reached:
                    piece = OutputPiece(offset=reached, data=piece.data[reached - piece.offset:],
                                        stream=piece.stream)
                reached = end
                yield piece
        finally:
            self._followers.discard(queue)

    # -- input and the end ------------------------------------------------------------------

    def write_input(self, data: bytes) -> None:
        """Blocking: run off the loop."""
        with self._input_lock:
            if not self.stdin_open:
                raise BrokenPipeError("its stdin is closed")
            attach.raw_socket(self.attached).sendall(data)

    def close_input(self) -> None:
        """Half-close our side: the program reads EOF (blocking: run off the loop)."""
        with self._input_lock:
            if self.stdin_open:
                self.stdin_open = False
                with contextlib.suppress(OSError):
                    attach.raw_socket(self.attached).shutdown(socket.SHUT_WR)

    def close_stream(self) -> None:
        attach.shutdown(self.attached)

    # -- its container (here; a process on a cluster node overrides these: ``on_node.py``) --

    async def send_signal(self, containers: Callable[[], ProcessContainers], signal: str
                          ) -> None:
        await containers().signal(self.container, signal)

    async def exit_state(self, containers: Callable[[], ProcessContainers]
                         ) -> dict[str, Any] | None:
        return await containers().final_state(self.container)

    async def remove_container(self, containers: Callable[[], ProcessContainers]) -> None:
        await containers().remove(self.container)

    def finish(self) -> None:
        """The process has ended and its record is closed: wake everyone."""
        if self._flush is not None:
            self._flush.cancel()
        self.flush(final=True)
        for queue in list(self._followers):
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(None)
        if not self.done.done():
            self.done.set_result(None)
        for task in self.tasks:
            task.cancel()

    def age_s(self) -> float:
        return time.time() - self.record.started_at
