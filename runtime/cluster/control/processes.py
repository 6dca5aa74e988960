"""A node's background processes, seen from the control plane: one stream per process.

Why: the node runs the container (`runtime.cluster.agent.processes`); this side keeps the
record, the log and everything a user sees (`runtime.processes.on_node`). `start` sends the
`ProcessOnNode` JSON and returns once the node says the container runs (its id), or raises
what the node refused; the `NodeProcess` it returns gives the output batches as they come,
then the exit state, and acts on the process by its id (`ProcessAct`). Cancelling the stream
sends an `end` act: the node kills the process and removes its container; a stream let go
(`cancel(end=False)`, a shutdown that keeps processes) or lost (a control plane that died)
leaves it running, and the next start re-attaches it (`attach`). A lost node ends the
stream with `NodeUnavailable`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import ray
from pydantic import BaseModel

from runtime.cluster.control.hop import LOST, Hop, wire
from runtime.nodes.process_wire import (
    PortOpen,
    ProcessAct,
    ProcessAttach,
    ProcessAttached,
    ProcessEnd,
    ProcessOnNode,
    Signal,
)
from runtime.nodes.wire import RunOnNode
from runtime.sandbox.models import ExecRequest, OutputChunk

STREAM_AHEAD = 32  # output batches a node may send ahead of this side's log (then it waits)


class NodeProcess:
    """One process's stream from its node, and the acts on it."""

    def __init__(self, hop: Hop, stream: Any, where: tuple[str, str, str], container: str
                 ) -> None:
        self._hop = hop
        self._stream = stream
        self._where = dict(zip(("tenant", "session", "process"), where, strict=True))
        self.container = container
        self.end: ProcessEnd | None = None

    async def output(self) -> AsyncIterator[list[OutputChunk]]:
        """Batches of output until the end (`self.end` set) or a lost node (raised)."""
        link = self._hop
        while True:
            try:
                ref = await self._stream.__anext__()
            except StopAsyncIteration:
                return
            except LOST as exc:
                raise link.lost(exc) from None
            batch = await link.wait(ref)
            chunks = [c for c in batch if isinstance(c, OutputChunk)]
            if chunks:
                yield chunks
            ends = [c for c in batch if isinstance(c, ProcessEnd)]
            if ends:
                self.end = ends[-1]
                return

    def act(self, op: str, data: bytes = b"", signal: Signal | None = None) -> None:
        """Input, EOF or a signal (blocking: run it off the loop)."""
        self._hop.call("process_act", wire(ProcessAct.model_validate(
            {**self._where, "op": op, "data": data, "signal": signal})))

    def cancel(self, end: bool = True) -> None:
        """Stop reading; `end`: the node kills the process (and removes its container),
        else it goes on running for the next start to adopt (`RemoteProcesses.attach`)."""
        if end:
            with contextlib.suppress(Exception):  # sent, not awaited
                self._hop.actor.process_act.remote(wire(ProcessAct.model_validate(
                    {**self._where, "op": "end"})))
        with contextlib.suppress(Exception):
            ray.cancel(self._stream)


class RemoteProcesses:
    def __init__(self, hop: Hop) -> None:
        self._hop = hop

    async def _opened(self, method: str, want: BaseModel) -> tuple[Any, Any]:
        """A process stream of the agent's `method` and its first answer (a `Failed` is
        raised as what the node refused)."""
        link = self._hop
        try:
            stream: Any = getattr(link.actor, method).options(
                num_returns="streaming", _generator_backpressure_num_objects=STREAM_AHEAD,
            ).remote(wire(want))
            ref = await stream.__anext__()
        except (StopAsyncIteration, *LOST) as exc:
            raise link.lost(exc) from None
        return stream, await link.wait(ref)

    async def start(self, request: ExecRequest, *, lifetime_s: float, frame: bytes,
                    env: dict[str, str], home: str | None, ports: list[int]) -> NodeProcess:
        """The process's container runs on the node (`request.exec_id` names its record)."""
        link = self._hop
        want = ProcessOnNode(run=RunOnNode.of(request, [], False), record=request.exec_id,
                             lifetime_s=lifetime_s, frame=frame, env=env, home=home,
                             ports=ports)
        stream, container = await self._opened("process_start", want)
        return NodeProcess(link, stream, (request.tenant, request.session, request.exec_id),
                           str(container))

    async def attach(self, tenant: str, session: str, process: str, offset: int
                     ) -> tuple[NodeProcess, ProcessAttached]:
        """A process the node still runs (or ran) for a control plane that restarted: its
        stream again, its output from `offset` on (`ProcessAttached.offset`: where the
        node's log starts it, later only when it no longer holds that much)."""
        link = self._hop
        want = ProcessAttach(tenant=tenant, session=session, process=process, offset=offset)
        stream, attached = await self._opened("process_attach", want)  # NotFound: not there
        return NodeProcess(link, stream, (tenant, session, process), attached.container), \
            attached

    async def end(self, tenant: str, session: str, process: str) -> None:
        """Kill and remove a process the node may still run for a control plane that died
        (its stream unread: the node's own end of it may never come)."""
        await asyncio.to_thread(self._hop.call, "process_act", wire(ProcessAct(
            tenant=tenant, session=session, process=process, op="end")))

    async def open_port(self, tenant: str, session: str, port: int
                        ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A byte stream to a declared port on the node, as a local stream pair: one end
        of a socket pair for the proxy, the other bridged to the node's `port_open`
        stream and `port_send` calls (in order, one at a time)."""
        link = self._hop
        try:
            stream: Any = link.actor.port_open.options(num_returns="streaming").remote(
                wire(PortOpen(tenant=tenant, session=session, port=port)))
            ref = await stream.__anext__()
        except StopAsyncIteration as exc:
            raise link.lost(exc) from None
        except LOST as exc:
            raise link.lost(exc) from None
        handle = str(await link.wait(ref))  # NotFound, PortUnreachable: raised as they were
        ours, theirs = socket.socketpair()
        far_reader, far_writer = await asyncio.open_connection(sock=theirs)

        async def down() -> None:  # the program's bytes to the proxy
            try:
                async for ref in stream:
                    data = await link.wait(ref)
                    if not data:
                        break
                    far_writer.write(data)
                    await far_writer.drain()
            finally:
                with contextlib.suppress(OSError):
                    far_writer.write_eof()

        async def up() -> None:  # the proxy's bytes to the program
            while data := await far_reader.read(64 * 1024):
                await link.wait(link.actor.port_send.remote(handle, data))
            await link.wait(link.actor.port_send.remote(handle, b""))

        async def bridge() -> None:
            try:
                await asyncio.gather(down(), up())
            except Exception:
                pass
            finally:
                far_writer.close()
                with contextlib.suppress(Exception):
                    ray.cancel(stream)

        task = asyncio.ensure_future(bridge())
        _BRIDGES.add(task)
        task.add_done_callback(_BRIDGES.discard)
        return await asyncio.open_connection(sock=ours)


_BRIDGES: set[asyncio.Future[None]] = set()  # running port bridges (kept referenced)
