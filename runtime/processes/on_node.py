"""A background process of a session on a cluster node: its container there, the rest here.

The node runs the container (`runtime.cluster.agent.processes`: the same hardened spec as
here, the session's /workspace and /tmp from the node's own disk, asked for by names only);
this control plane keeps what a user sees: the record, the policy's decision and counts, the
audit, and the output log. The node streams the output back in batches as it comes
(`runtime.cluster.control.processes`), and `NodeLiveProcess` writes it into the same
`OutputLog` a process here writes, so list, output, wait, follow and the session's events
work unchanged; `Ends` ends it as any other (its signals, exit state and removal go over
the hop). Its declared ports are served by the node's relay broker and reached over the hop
(`PortsHub.add_remote`). Egress the policy grants goes to the node by value (the request's
`egress_allowlist`): the node runs the process's egress proxy, which refuses the cluster's
own machines as a call's does, and ends it with the process. Limits (docs/processes.md):
its stdin, like its output, passes through the control plane; a control plane that stops
ends its node processes (`interrupted`: the stream that reports them goes with it).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from runtime.errors import Conflict, NaviError
from runtime.events import SessionEventBus
from runtime.logging import get_logger
from runtime.policy.decision import Decision, Subject
from runtime.processes.container import ProcessContainers
from runtime.processes.ends import Ends
from runtime.processes.launch import WORKDIR, moved_cwd
from runtime.processes.live import LiveProcess
from runtime.processes.models import ProcessRecord, StartSpec, Stream
from runtime.processes.outlog import OutputLog
from runtime.processes.table import LaunchExtras, ProcessTable
from runtime.sandbox.models import ExecRequest, OutputChunk
from runtime.sandbox.stdin_program import TINI_GROUP_ENV, shell_program

log = get_logger(__name__)


class NodeEnd(Protocol):
    exit_code: int | None
    oom_killed: bool


class NodeStream(Protocol):
    """`runtime.cluster.control.processes.NodeProcess`."""

    container: str
    end: NodeEnd | None

    def output(self) -> AsyncIterator[list[OutputChunk]]: ...

    def act(self, op: str, data: bytes = b"", signal: Any = None) -> None: ...

    def cancel(self, end: bool = True) -> None: ...


class NodeLiveProcess(LiveProcess):
    """A `LiveProcess` whose output, input and signals go over the hop to its node."""

    def __init__(self, record: ProcessRecord, stream: NodeStream, outlog: OutputLog,
                 bus: SessionEventBus) -> None:
        super().__init__(record, stream.container, None, outlog, bus)
        self.stream = stream

    def start_pump(self) -> asyncio.Future[None]:
        self.pump = asyncio.ensure_future(self._pump())
        return self.pump

    async def _pump(self) -> None:
        try:
            async for batch in self.stream.output():
                placed = await asyncio.to_thread(self._append, batch)
                for offset, data, stream in placed:
                    self._arrived(offset, data, stream)
        except NaviError as exc:  # the node was lost: its process with it
            log.warning("node_process_lost", process=self.id, error=exc.message)
            if self.ending is None:
                self.ending = "interrupted"

    def _append(self, batch: list[OutputChunk]) -> list[tuple[int, bytes, Stream]]:
        return [(self.outlog.append(c.data, c.stream), c.data, c.stream) for c in batch]

    def write_input(self, data: bytes) -> None:
        """Blocking: run off the loop."""
        with self._input_lock:
            if not self.stdin_open:
                raise BrokenPipeError("its stdin is closed")
            try:
                self.stream.act("input", data)
            except NaviError as exc:
                raise BrokenPipeError(exc.message) from None

    def close_input(self) -> None:
        with self._input_lock:
            if self.stdin_open:
                self.stdin_open = False
                self.stream.act("eof")

    def close_stream(self) -> None:
        self.stream.cancel(end=not self.detached)  # detached: kept for the next start

    async def send_signal(self, containers: Callable[[], ProcessContainers], signal: str
                          ) -> None:
        await asyncio.to_thread(self.stream.act, "signal", b"", signal)

    async def exit_state(self, containers: Callable[[], ProcessContainers]
                         ) -> dict[str, Any] | None:
        end = self.stream.end
        if end is None:
            return None
        return {"ExitCode": end.exit_code, "OOMKilled": end.oom_killed}

    async def remove_container(self, containers: Callable[[], ProcessContainers]) -> None:
        """The node removes it after its end (or when its stream is cancelled)."""
        if self.stream.end is None:
            self.stream.cancel()


async def launch_on_node(table: ProcessTable, ends: Ends, subject: Subject, spec: StartSpec,
                         decision: Decision, record: ProcessRecord, *, lifetime_s: float
                         ) -> LiveProcess:
    services = table.services
    node = services.nodes.get(subject.node)
    remote = getattr(node, "processes", None)
    if remote is None:
        raise Conflict(f"node {subject.node!r} runs no background processes")
    extras = LaunchExtras()
    for hook in table.launch_hooks:
        more = await hook(record.public(), subject)
        if more is not None:
            if more.mounts or more.argv_prefix:
                raise Conflict("a process on a cluster node takes no extra mounts")
            extras = LaunchExtras(env={**extras.env, **more.env},
                                  workdir=more.workdir or extras.workdir)
    workdir = extras.workdir or WORKDIR
    argv, frame = shell_program(spec.command, moved_cwd(record.cwd, workdir))
    request = ExecRequest(
        argv=argv, env=dict(spec.env), workdir=workdir,
        workspace=await asyncio.to_thread(node.verify, subject.tenant, subject.session),
        tmp=node.tmp_path(subject.tenant, subject.session),
        image=services.executor.resolve_image(decision.image or ""), limits=decision.limits,
        network="egress" if decision.egress_allowlist else "none",
        egress_allowlist=decision.egress_allowlist, exec_id=record.id,
        tenant=subject.tenant, session=subject.session, node=subject.node,
        uid=subject.sandbox_uid)
    outlog = await asyncio.to_thread(ends.log_of, record)
    stream: NodeStream = await remote.start(
        request, lifetime_s=lifetime_s, frame=frame, env={**extras.env, **TINI_GROUP_ENV},
        home=extras.workdir, ports=list(record.ports))
    try:
        await table.records.set_container(record.id, stream.container)
    except BaseException:
        stream.cancel()  # the node removes its container
        raise
    live = NodeLiveProcess(record.model_copy(update={"container": stream.container}),
                           stream, outlog, services.hub.bus(subject.session))
    relay_ports(services, remote, record)
    ends.watch(live, lifetime_s)
    return live


def relay_ports(services: Any, remote: Any, record: ProcessRecord) -> None:
    """A node process's declared ports, reached over the hop (`PortsHub.add_remote`), at
    its start and when a restarted control plane adopts it."""
    ports = getattr(services, "ports", None)  # the server's `PortsService`, if it runs one
    if not record.ports or ports is None:
        return
    tenant, session = record.tenant_id, record.session_id

    async def opener(port: int) -> Any:
        return await remote.open_port(tenant, session, port)

    ports.hub.add_remote(session, record.id, list(record.ports), opener)
