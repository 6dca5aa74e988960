"""A node agent's background processes: each in a fresh hardened container on this node.

Why here: a session on a node has its disk and its containers on that node; the control
plane keeps the record, the policy's decision, the counts, the audit and the output log
(`runtime.processes.on_node`). It asks for a process with the JSON of
`runtime.nodes.process_wire.ProcessOnNode` (names only: this node resolves the session's
workspace and /tmp, as for a call), and the container is made with the spec a process on
one machine gets (`runtime.processes.container.ProcessContainers`: the call's hardened
spec, leased for the lifetime cap, labelled with its record). The session's disk is held
open while it runs. `start` is a stream: the container's id first, then the output in
batches as it comes, then a `ProcessEnd`; the container is removed after its end. The
process outlives its stream: its output goes into a log on this node
(`runtime.cluster.agent.process_runs`), so a restarted control plane re-attaches it
(`attach`: its output from where the control plane's log ended) and its input, signals and
end work again; it is killed only by an `end` act (the control plane ending it) or the
agent's stop, and the node's reaper takes one past its lease (its lifetime cap). A process
granted egress gets its own proxy on this node (`runtime.cluster.agent.process_egress`),
closed at its end, after its container is removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from runtime.cluster.agent.process_egress import open_process_egress
from runtime.cluster.agent.process_runs import NodeRun, NodeRuns
from runtime.egress import EgressProxy
from runtime.errors import Conflict, NotFound
from runtime.logging import get_logger
from runtime.nodes.failures import Failed, packed
from runtime.nodes.process_wire import (
    ProcessAct,
    ProcessAttach,
    ProcessAttached,
    ProcessEnd,
    ProcessOnNode,
)
from runtime.nodes.wire import RunOnNode, parsed
from runtime.ports.hub import PortsHub
from runtime.processes.container import ProcessContainers
from runtime.sandbox.docker import attach
from runtime.sandbox.docker.backend import DockerBackend
from runtime.sandbox.docker.spec import BindMount
from runtime.sandbox.models import ExecRequest
from runtime.workspace import Workspace
from runtime.workspace.manager import Workspaces

log = get_logger(__name__)

END_WAIT_S = 10.0  # an `end` act waits this long for the killed process's end


class NodeProcesses:
    """The agent's collaborator for processes (`NodeAgent.process_start`/`process_act`/
    `process_attach`)."""

    def __init__(self, backend: DockerBackend, workspaces: Workspaces,
                 resolve: Callable[[RunOnNode], ExecRequest],
                 ready: Callable[[], Awaitable[object]], ports: PortsHub,
                 logs: Path) -> None:
        self.containers = ProcessContainers(backend)
        self.ports = ports  # the node's relay broker (`runtime.cluster.agent.ports`)
        self.workspaces = workspaces
        self.resolve = resolve
        self.ready = ready
        self.runs = NodeRuns(logs)  # each process's output log (`process_runs`)

    @property
    def running(self) -> dict[str, NodeRun]:
        return self.runs.running

    async def start(self, payload: bytes) -> AsyncIterator[Any]:
        lease: Workspace | None = None
        container: str | None = None
        record: str | None = None
        ported: str | None = None
        run: NodeRun | None = None
        proxy: EgressProxy | None = None  # its egress proxy, if granted
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
            relay = await self.ports.relay_for_process(request.session, record, want.ports)
            if relay is not None:  # as a process here gets it (`PortsService`)
                mounts = tuple(BindMount(source=str(m.source), target=m.target)
                               for m in relay[0])
                prefix = tuple(relay[1])
            proxy = await open_process_egress(self.containers.backend, request)
            spec = await self.containers.spec(request, record_id=record,
                                              lifetime_s=want.lifetime_s,
                                              egress=proxy.socket_path if proxy else None,
                                              env=dict(want.env), home=want.home,
                                              mounts=mounts, argv_prefix=prefix)
            container = await self.containers.create(spec)
            run = await asyncio.to_thread(self.runs.begin, record, request.tenant,
                                          request.session, container, want.lifetime_s)
            attached = await self.containers.attach_and_start(container)
            with contextlib.suppress(OSError):  # a program that exits first: its status
                await asyncio.to_thread(attach.raw_socket(attached).sendall, want.frame)
        except Exception as exc:
            if run is not None and record is not None:
                self.runs.forget(record, run)
            await self._clean(container, None, lease, ported, killed=True, proxy=proxy)
            yield packed(exc)
            return

        async def on_end() -> ProcessEnd:  # its exit state, then its cleanup
            assert container is not None
            state = await self.containers.final_state(container) or {}
            code = state.get("ExitCode")
            await self._clean(container, attached, lease, ported, killed=False, proxy=proxy)
            return ProcessEnd(exit_code=code if isinstance(code, int) else None,
                              oom_killed=bool(state.get("OOMKilled")))

        self.runs.read(record, run, attached, on_end)
        yield container
        async for batch in self.runs.follow(record, run, 0):
            yield batch

    async def attach(self, payload: bytes) -> AsyncIterator[Any]:
        """A restarted control plane adopts a process: `ProcessAttached`, then its output
        from the asked offset (or what the log still holds), then its end."""
        try:
            await self.ready()
            want = parsed(ProcessAttach, payload)
            run = self._of(want.process, want.tenant, want.session)
        except Exception as exc:
            yield packed(exc)
            return
        yield ProcessAttached(container=run.container,
                              offset=max(want.offset, run.outlog.first),
                              lifetime_s=run.lifetime_s, stdin_open=run.stdin_open)
        async for batch in self.runs.follow(want.process, run, want.offset):
            yield batch

    def _of(self, process: str, tenant: str, session: str) -> NodeRun:
        found = self.running.get(process)
        if found is None or (found.tenant, found.session) != (tenant, session):
            raise NotFound(f"no running process {process} of this session here")
        return found

    async def _clean(self, container: str | None, attached: Any, lease: Workspace | None,
                     ported: str | None, *, killed: bool, proxy: EgressProxy | None = None
                     ) -> None:
        if container is not None and killed:
            with contextlib.suppress(Exception):
                await self.containers.signal(container, "KILL")
        if attached is not None:
            attach.shutdown(attached)
        if container is not None:
            with contextlib.suppress(Exception):
                await self.containers.remove(container)
        if proxy is not None:  # after its container: no connection outlives it
            await asyncio.shield(proxy.close())
        if lease is not None:
            await asyncio.to_thread(lease.close)
        if ported is not None:
            with contextlib.suppress(Exception):
                await self.ports.process_ended(ported)

    async def act(self, payload: bytes) -> None | Failed:
        try:
            want = parsed(ProcessAct, payload)
            found = self._of(want.process, want.tenant, want.session)
            if want.op == "end":  # kill it now; its container and lease go at its end
                if found.end is None:
                    with contextlib.suppress(Exception):
                        await self.containers.signal(found.container, "KILL")
                await self.runs.finished(want.process, found, END_WAIT_S)
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
    def _write(found: NodeRun, data: bytes, *, eof: bool) -> None:
        with found.lock:
            if not found.stdin_open:
                if eof:
                    return
                raise Conflict("its stdin is closed")
            if found.end is not None or found.attached is None:
                raise Conflict("it does not take input now (it ended)")
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
