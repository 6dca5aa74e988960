"""A node's running processes, each with its output kept in a log on the node.

Why: a control plane that restarts adopts its node processes (`NodeAgent.process_attach`);
so a process must outlive the stream that reports it, and the output written while no
control plane read it must still be there. One reader thread per process writes the
container's output into an `OutputLog` on the node's disk (byte offsets, the last `LOG_KEEP`
bytes at least); a stream to a control plane follows that log from an offset (`follow`).
While a stream follows, the reader waits when that stream is `LAG_MAX` behind, so a slow
control plane slows the program as before and never misses a byte; with no stream (the
control plane is away) the log keeps the newest `LOG_KEEP` bytes. A newer stream of the same
process (a control plane's next start) supersedes the older one. At the process's end its
exit state is kept, its container removed and its lease given back; a stream that has
delivered the end forgets it; an end nobody collected is forgotten after `ORPHAN_KEEP_S`.
Only an `end` act (or the agent's own stop) kills a process: closing a stream does not.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from runtime.logging import get_logger
from runtime.nodes.process_wire import ProcessEnd
from runtime.processes.models import Stream
from runtime.processes.outlog import OutputLog
from runtime.sandbox.docker import attach
from runtime.sandbox.models import OutputChunk

log = get_logger(__name__)

LOG_KEEP = 4 * 1024 * 1024  # a node log keeps at least this much of a process's output
LAG_MAX = 2 * 1024 * 1024  # how far a following stream may fall behind the program
BATCH_MAX = 256 * 1024  # bytes in one message to the control plane
COALESCE_S = 0.02  # output within this of a chunk goes back in the same message
ORPHAN_KEEP_S = 3600.0  # an ended process no control plane collected: kept this long
STREAMS = {attach.STDOUT: "stdout", attach.STDERR: "stderr"}


@dataclass
class NodeRun:
    """One process the node runs (or ran: `end` set) for a control plane."""

    tenant: str
    session: str
    container: str
    lifetime_s: float
    outlog: OutputLog
    attached: Any = None
    stdin_open: bool = True
    end: ProcessEnd | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)  # stdin writes
    follower: int = 0  # the stream that follows now (a newer one supersedes it)
    reading: int | None = None  # where that stream is, for the reader's wait
    room: threading.Condition = field(default_factory=threading.Condition)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    def at(self, position: int | None) -> None:
        with self.room:
            self.reading = position
            self.room.notify_all()


class NodeRuns:
    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.running: dict[str, NodeRun] = {}
        self._tasks: set[asyncio.Future[None]] = set()

    def _keep(self, task: asyncio.Future[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def begin(self, record: str, tenant: str, session: str, container: str,
              lifetime_s: float) -> NodeRun:
        """Blocking (the log's file): run off the loop."""
        path = self.logs / f"{record}.log"
        OutputLog(path).remove()  # a record's id is never reused: nothing of another's
        run = NodeRun(tenant, session, container, lifetime_s, OutputLog(path, keep=LOG_KEEP))
        self.running[record] = run
        return run

    def read(self, record: str, run: NodeRun, attached: Any,
             on_end: Callable[[], Awaitable[ProcessEnd]]) -> None:
        """Follow the started container's output into its log until its end, then
        ``on_end`` (its exit state, after its cleanup)."""
        run.attached = attached
        loop = asyncio.get_running_loop()

        def woken() -> None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(run.changed.set)

        async def ended() -> None:
            try:
                run.end = await on_end()
            finally:
                if run.end is None:
                    run.end = ProcessEnd(exit_code=None)
                run.ended.set()
                run.changed.set()
                loop.call_later(ORPHAN_KEEP_S, self.forget, record, run)

        thread = attach.in_thread(_copy, attach.raw_socket(attached), run, woken,
                                  name=f"navi-nproc-{run.container[:8]}")
        thread.add_done_callback(lambda _: self._keep(asyncio.ensure_future(ended())))

    async def follow(self, record: str, run: NodeRun, since: int) -> AsyncIterator[Any]:
        """Output batches from ``since`` (or the log's first byte kept), then its end; the
        process is forgotten once its end went out."""
        run.follower += 1
        mine = run.follower
        position = max(since, run.outlog.first)
        run.at(position)
        try:
            while run.follower == mine:
                run.changed.clear()
                done = run.end is not None
                pieces = await asyncio.to_thread(run.outlog.pieces, position, BATCH_MAX,
                                                 complete=done)
                if pieces:
                    last_at, last, _ = pieces[-1]
                    position = last_at + len(last)
                    yield [OutputChunk(stream=cast(Stream, s), data=d) for _, d, s in pieces]
                    if run.follower == mine:
                        run.at(position)
                    continue
                if done and position >= run.outlog.end:
                    assert run.end is not None
                    yield [run.end]
                    self.forget(record, run)
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(run.changed.wait(), 1.0)
                await asyncio.sleep(COALESCE_S)
        finally:
            if run.follower == mine:
                run.at(None)

    def forget(self, record: str, run: NodeRun) -> None:
        if self.running.get(record) is run:
            del self.running[record]
            run.outlog.remove()

    async def finished(self, record: str, run: NodeRun, within_s: float) -> None:
        """Wait for its end (after a kill), then forget it."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(run.ended.wait(), within_s)
        self.forget(record, run)


def _copy(sock: socket.socket, run: NodeRun, woken: Callable[[], None]) -> None:
    """Docker's multiplexed frames into the log until EOF (on the reader's thread)."""
    try:
        for kind, piece in attach.frames(sock):
            with run.room:
                while run.reading is not None and \
                        run.outlog.end - run.reading > LAG_MAX:
                    run.room.wait(1.0)
            run.outlog.append(piece, STREAMS.get(kind, "stdout"))
            woken()
    except (OSError, ValueError) as exc:  # we shut the socket down
        log.debug("node_process_stream_closed", error=str(exc))

