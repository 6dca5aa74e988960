"""The control plane's end of a node's exec channel (`runtime.cluster.agent.channel`).

One connection per node, opened when a call first needs it and again after it dropped,
calls multiplexed by id. A call that finds no channel (the agent has none, it does not
answer, or its proof fails: tried again after `RETRY_S`) goes by Ray as before; a call
whose request went out when the connection drops ends as `DROPPED`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Awaitable

from runtime.cluster.control.hop import Hop
from runtime.errors import NodeUnavailable
from runtime.logging import get_logger
from runtime.nodes.channel_wire import (
    BATCH,
    CANCEL,
    END,
    FAILED,
    GATE,
    MAX_FRAME,
    RUN,
    TO_CONTROL,
    Batch,
    ChannelError,
    FailedWord,
    GateWord,
    frame,
    prove_as_client,
    read_frame,
)
from runtime.nodes.failures import raise_failed
from runtime.sandbox.backend import OutputCallback
from runtime.sandbox.models import ExecResult

log = get_logger(__name__)
CONNECT_S = 2.0
RETRY_S = 5.0  # after a failed connection, calls go by Ray this long before the next try
DROPPED = b""  # a reply kind: the connection ended before the call's last reply
PROBE_S = 10.0  # a channel dropped during a call: the agent must answer Ray by then
MAX_REQUEST = MAX_FRAME // 2  # larger requests (tool objects) go by Ray
MAX_OUTPUT = 2 * 1024 * 1024  # calls that may print more per stream go by Ray (frame room)


class ChannelCall:
    """One call on the channel: its replies, its gate's word, its cancel."""

    def __init__(self, writer: asyncio.StreamWriter, calls: dict[int, ChannelCall],
                 call: int) -> None:
        self._writer = writer  # its connection
        self._calls = calls  # and that connection's calls
        self.id = call
        self.replies: asyncio.Queue[tuple[bytes, bytes]] = asyncio.Queue()

    def gate(self, exec_id: str, durable: bool) -> None:
        self._send(frame(GATE, self.id, GateWord(exec_id=exec_id, durable=durable)
                         .model_dump_json().encode()))

    def cancel(self) -> None:
        self._send(frame(CANCEL, self.id))

    def _send(self, data: bytes) -> None:
        if not self._writer.is_closing():
            self._writer.write(data)

    async def next(self) -> tuple[bytes, bytes]:
        """The next reply: (kind, payload); `DROPPED` when the connection ended."""
        return await self.replies.get()

    def end(self) -> None:
        self._calls.pop(self.id, None)


class NodeChannel:
    def __init__(self, node_id: str, address: str, token: bytes) -> None:
        self.node_id = node_id
        host, _, port = address.rpartition(":")
        self._host, self._port = host, int(port)
        self._token = token
        self._ids = itertools.count(1)
        self.calls: dict[int, ChannelCall] = {}  # the open connection's calls
        self._writer: asyncio.StreamWriter | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock: asyncio.Lock | None = None
        self._retry_at = 0.0

    async def call(self, request: bytes) -> ChannelCall | None:
        """A call with its request sent, or None: no channel now (send it by Ray)."""
        writer = await self._connected()
        if writer is None:
            return None
        on = ChannelCall(writer, self.calls, next(self._ids))
        self.calls[on.id] = on
        writer.write(frame(RUN, on.id, request))
        return on

    async def _connected(self) -> asyncio.StreamWriter | None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a connection serves the loop that opened it
            self._loop, self._lock, self._writer = loop, asyncio.Lock(), None
        assert self._lock is not None
        async with self._lock:
            writer = self._writer
            if writer is not None and not writer.is_closing():
                return writer
            self._writer = None
            if time.monotonic() < self._retry_at:
                return None
            try:
                async with asyncio.timeout(CONNECT_S):
                    reader, writer = await asyncio.open_connection(self._host, self._port,
                                                                   limit=64 * 1024)
                try:
                    await prove_as_client(reader, writer, self._token)
                except BaseException:
                    writer.close()
                    raise
            except (OSError, EOFError, TimeoutError, ChannelError) as exc:
                self._retry_at = time.monotonic() + RETRY_S
                log.warning("node_channel_unavailable", node=self.node_id,
                            error=type(exc).__name__)
                return None
            self._writer, self.calls = writer, {}
            loop.create_task(self._read(reader, writer, self.calls))
            return writer

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    calls: dict[int, ChannelCall]) -> None:
        """Replies to their calls until the connection ends; then its calls are DROPPED."""
        try:
            while True:
                kind, call, payload = await read_frame(reader, TO_CONTROL)
                on = calls.get(call)
                if on is not None:
                    on.replies.put_nowait((kind, payload))
        except (ChannelError, OSError, EOFError):
            pass
        finally:
            writer.close()
            if self._writer is writer:
                self._writer = None
            for on in list(calls.values()):
                on.replies.put_nowait((DROPPED, b""))
            calls.clear()
            log.info("node_channel_closed", node=self.node_id)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()


async def by_channel(link: Hop, on: ChannelCall, exec_id: str,
                     on_output: OutputCallback | None,
                     before_start: Awaitable[object] | None) -> ExecResult:
    """`RemoteBackend.run` over the channel, its request sent: the gate's word once the
    audit intent is durable, the output as it comes, the result. Ended early (cancelled,
    the client gone), the call is cancelled on the node, which kills it."""
    finished = False
    try:
        if before_start is not None:
            try:
                await before_start
            except BaseException:
                on.gate(exec_id, False)  # nothing runs
                raise
            on.gate(exec_id, True)  # the intent is durable
        while True:
            kind, payload = await on.next()
            if kind == BATCH:
                for item in Batch.model_validate_json(payload).unpacked():
                    if isinstance(item, ExecResult):
                        finished = True
                        return item
                    if on_output is not None:
                        await on_output(item)
            elif kind == FAILED:
                finished = True
                raise_failed(FailedWord.model_validate_json(payload).failed())
            elif kind == END:
                finished = True
                raise link.lost(RuntimeError("the run ended without a result"))
            else:  # DROPPED
                finished = True
                raise await _dropped(link)
    finally:
        if not finished:
            on.cancel()
        on.end()


async def _dropped(link: Hop) -> NodeUnavailable:
    """The channel dropped during a call: the node is lost if its agent does not answer by
    Ray either; else only this call is (the next one connects again)."""
    try:
        async with asyncio.timeout(PROBE_S):
            await link.wait(link.actor.pid.remote())
    except NodeUnavailable as exc:
        return exc
    except Exception as exc:  # no answer in time
        return link.lost(exc)
    return NodeUnavailable(link.node_id, f"node {link.node_id} is unavailable (its "
                           "channel closed during the call)")
