"""A node agent's background processes: each in a fresh hardened container on this node.

Why here: a session on a node has its disk and its containers on that node; the control
plane keeps the record, the policy's decision, the counts, the audit and the output log
(`runtime.processes.on_node`). It asks for a process with the JSON of
`runtime.nodes.process_wire.ProcessOnNode` (names only: this node resolves the session's
workspace and /tmp, as for a call), and the container is made with the spec a process on
one machine gets (`runtime.processes.container.ProcessContainers`: the call's hardened
spec, leased for the lifetime cap, labelled with its record). The session's disk is held
open while it runs. `start` is a stream: the container's id first, then the output in
batches as it comes, then a `ProcessEnd`; the container is removed after its end. Closing
the stream early (the control plane stopped reading, or went) kills and removes it, so no
container outlives the stream that reports it; the node's reaper takes one whose agent died
(its lease label).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from runtime.errors import Conflict, NotFound
from runtime.logging import get_logger
from runtime.nodes.failures import Failed, packed
from runtime.nodes.process_wire import ProcessAct, ProcessEnd, ProcessOnNode
from runtime.nodes.wire import RunOnNode, parsed
from runtime.ports.hub import PortsHub
from runtime.processes.container import ProcessContainers
from runtime.sandbox.docker import attach
from runtime.sandbox.docker.backend import DockerBackend
from runtime.sandbox.docker.spec import BindMount
from runtime.sandbox.models import ExecRequest, OutputChunk
from runtime.streaming import Feed
from runtime.workspace import Workspace
from runtime.workspace.manager import Workspaces

log = get_logger(__name__)

COALESCE_S = 0.02  # output within this of a chunk goes back in the same message
STREAMS = {attach.STDOUT: "stdout", attach.STDERR: "stderr"}


@dataclass
class _Running:
    tenant: str
    session: str
    container: str
    attached: Any
    stdin_open: bool = True
    lock: threading.Lock = field(default_factory=threading.Lock)
    finish: Callable[[], Awaitable[None]] | None = None  # its end, once (`end`)


def _read_frames(sock: socket.socket, emit: Callable[[OutputChunk], None]) -> None:
    """Docker's multiplexed frames until EOF, each payload handed to ``emit``."""
    try:
        for kind, piece in attach.frames(sock):
            emit(OutputChunk(stream=STREAMS.get(kind, "stdout"), data=piece))
    except (OSError, ValueError) as exc:  # we shut the socket down
        log.debug("node_process_stream_closed", error=str(exc))


class NodeProcesses:
    """The agent's collaborator for processes (`NodeAgent.process_start`/`process_act`)."""

    def __init__(self, backend: DockerBackend, workspaces: Workspaces,
                 resolve: Callable[[RunOnNode], ExecRequest],
                 ready: Callable[[], Awaitable[object]], ports: PortsHub) -> None:
        self.containers = ProcessContainers(backend)
        self.ports = ports  # the node's relay broker (`runtime.cluster.agent.ports`)
        self.workspaces = workspaces
        self.resolve = resolve
        self.ready = ready
        self.running: dict[str, _Running] = {}

    async def start(self, payload: bytes) -> AsyncIterator[Any]:
        lease: Workspace | None = None
        container: str | None = None
        attached: Any = None
        record: str | None = None
        ported: str | None = None
        ended = cleaned = False

        async def finish() -> None:  # once: by the stream's end or by an `end` act
            nonlocal cleaned
            if cleaned:
                return
            cleaned = True
            if record is not None:
                self.running.pop(record, None)
            await self._clean(container, attached, lease, killed=not ended)
            if ported is not None:
                with contextlib.suppress(Exception):
                    await self.ports.process_ended(ported)

        try:
            try:
                await self.ready()
                want = parsed(ProcessOnNode, payload)
                if want.record in self.running:
                    raise Conflict(f"process {want.record} runs already")
                record = want.record
                request = await asyncio.to_thread(self.resolve, want.run)
                lease = await asyncio.to_thread(self.workspaces.open, request.tenant,
                                                request.session)
                mounts: tuple[BindMount, ...] = ()
                prefix: tuple[str, ...] = ()
                ported = record
                relay = await self.ports.relay_for_process(request.session, record,
                                                           want.ports)
                if relay is not None:  # as a process here gets it (`PortsService`)
                    mounts = tuple(BindMount(source=str(m.source), target=m.target)
                                   for m in relay[0])
                    prefix = tuple(relay[1])
                spec = await self.containers.spec(request, record_id=record,
                                                  lifetime_s=want.lifetime_s,
                                                  env=dict(want.env), home=want.home,
                                                  mounts=mounts, argv_prefix=prefix)
                container = await self.containers.create(spec)
                attached = await self.containers.attach_and_start(container)
                with contextlib.suppress(OSError):  # a program that exits first: its status
                    await asyncio.to_thread(attach.raw_socket(attached).sendall, want.frame)
            except Exception as exc:
                record = None
                yield packed(exc)
                return
            self.running[record] = _Running(request.tenant, request.session, container,
                                            attached, finish=finish)
            yield container
            async for batch in self._output(attached, container):
                if isinstance(batch[-1], ProcessEnd):
                    ended = True
                yield batch
        finally:
            await asyncio.shield(finish())

    async def _output(self, attached: Any, container: str) -> AsyncIterator[list[Any]]:
        loop = asyncio.get_running_loop()
        feed: Feed[OutputChunk] = Feed()

        def emit(chunk: OutputChunk) -> None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(feed.put_nowait, chunk)

        feed.follow(attach.in_thread(_read_frames, attach.raw_socket(attached), emit,
                                     name=f"navi-nproc-{container[:8]}"))
        async for batch, last in feed.batches(COALESCE_S):
            if not last:
                yield list(batch)
                continue
            state = await self.containers.final_state(container) or {}
            code = state.get("ExitCode")
            yield [*batch, ProcessEnd(exit_code=code if isinstance(code, int) else None,
                                      oom_killed=bool(state.get("OOMKilled")))]
            return

    async def _clean(self, container: str | None, attached: Any, lease: Workspace | None,
                     *, killed: bool) -> None:
        if container is not None and killed:
            with contextlib.suppress(Exception):
                await self.containers.signal(container, "KILL")
        if attached is not None:
            attach.shutdown(attached)
        if container is not None:
            with contextlib.suppress(Exception):
                await self.containers.remove(container)
        if lease is not None:
            await asyncio.to_thread(lease.close)

    async def act(self, payload: bytes) -> None | Failed:
        try:
            want = parsed(ProcessAct, payload)
            found = self.running.get(want.process)
            if found is None or (found.tenant, found.session) != (want.tenant, want.session):
                raise NotFound(f"no running process {want.process} of this session here")
            if want.op == "end":  # its control plane is gone: kill and remove it now
                if found.finish is not None:
                    await asyncio.shield(found.finish())
                return None
            if want.op == "signal":
                assert want.signal is not None
                await self.containers.signal(found.container, want.signal)
                return None
            await asyncio.to_thread(self._write, found, want.data, eof=want.op == "eof")
            return None
        except Exception as exc:
            return packed(exc)

    @staticmethod
    def _write(found: _Running, data: bytes, *, eof: bool) -> None:
        with found.lock:
            if not found.stdin_open:
                if eof:
                    return
                raise Conflict("its stdin is closed")
            sock = attach.raw_socket(found.attached)
            if eof:
                found.stdin_open = False
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_WR)
                return
            try:
                sock.sendall(data)
            except OSError:
                raise Conflict("it does not take input now (its program closed stdin or "
                               "ended)") from None

    async def close(self) -> None:
        """The agent stops: every process it runs ends with it."""
        for found in list(self.running.values()):
            with contextlib.suppress(Exception):
                await self.containers.signal(found.container, "KILL")
