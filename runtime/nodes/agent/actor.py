"""The node agent: a Ray actor that owns one execution node's engine, disks and warm pool.

Why: with a cluster, a session's files and containers live on one node; the control plane
keeps the API, policy, audit and store and reaches the node only through this actor
(`runtime.nodes.control.remote.RemoteNode` is its other end). It is the same hardened machinery as
on one machine, started the same way (`runtime.nodes.machine.Machine`): `DockerBackend`
(the node's engine from DOCKER_HOST, its images, warm pool, egress proxy, reaper) and
`Workspaces` (session disks under the node's own data dir, the mount guard, idle release).
Its egress proxies also refuse the cluster's own machines
(`runtime.nodes.agent.cluster_addresses`), read from Ray before it takes work.

The agent takes work only through Ray, which admits only holders of the cluster's token
(no dashboard, no job API run), and even then trusts no request: each is the JSON of a
`runtime.nodes.wire` model, validated here; it names the session and what to mount, and
the agent resolves that to its own directories (a path named in a request is refused).
A tool's code comes by content hash into the node's tool-object directory
(`runtime.nodes.agent.objects`). The tenant disk limits it was told are kept in its data
dir (`tenant-limits.json`), so a disk mounted again after a restart is admitted against
them. Errors go back as `Failed` values (`runtime.nodes.failures`).
Files move in bounded chunks (`CHUNK`, `READ_CHUNK`): reads are a streaming generator,
writes a handle fed numbered chunks (written in order), committed or aborted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from runtime.config import Settings
from runtime.errors import AuditUnavailable, NaviError
from runtime.logging import get_logger
from runtime.nodes.agent.cluster_addresses import ClusterAddresses
from runtime.nodes.agent.kernels import NodeKernels
from runtime.nodes.agent.objects import NodeObjects
from runtime.nodes.agent.ports import NodePorts
from runtime.nodes.agent.processes import NodeProcesses
from runtime.nodes.agent.resolve import relative, resolved
from runtime.nodes.agent.snapshots import SnapshotMethods
from runtime.nodes.failures import Failed, packed
from runtime.nodes.machine import Machine
from runtime.nodes.wire import (
    CreateDisk,
    FileOp,
    ReadOp,
    RunOnNode,
    Where,
    WriteOpen,
    parsed,
)
from runtime.sandbox.docker.backend import DockerBackend
from runtime.sandbox.models import ExecResult, OutputChunk
from runtime.streaming import Feed
from runtime.workspace import AtomicWriter, Workspace

log = get_logger(__name__)
T = TypeVar("T")

READ_CHUNK = 1024 * 1024  # the most bytes a read streams a message
GATE_KEPT_S = 60.0  # an open_gate whose run never came is dropped after this
COALESCE_S = 0.005  # output within this of a chunk (or the end) goes in the same message
WRITER_IDLE_S = 600.0  # an upload its control plane forgot is aborted after this


def actor_name(node_id: str) -> str:
    return f"navi-node-{node_id}"


@dataclass
class _Upload:
    workspace: Workspace
    writer: AtomicWriter
    used: float
    next_seq: int = 0  # chunks are sent without waiting: they are written in this order
    turn: asyncio.Condition = field(default_factory=asyncio.Condition)
    failed: Failed | None = None


class NodeAgent(SnapshotMethods):
    """Made by `runtime.nodes.control.remote.agent_for` as a detached, named async Ray actor pinned
    to its node. `data_dir`: the node's Navi data dir (default NAVI_DATA_DIR of the node);
    `disks`: session disks (loop-mounted images) on, off, or None: when the node can."""

    def __init__(self, node_id: str, data_dir: str | None = None,
                 disks: bool | None = None) -> None:
        self.node_id = node_id
        self.settings = Settings() if data_dir is None else Settings(data_dir=Path(data_dir))
        self.cluster_addresses = ClusterAddresses()
        self._tenant_limits: dict[str, int] = {}  # what its control plane last said
        self.machine = Machine(  # as `navi serve` alone starts it
            self.settings, disks=disks, tenant_limit=self._tenant_limits.get,
            egress_denied=self.cluster_addresses)
        self.workspaces = self.machine.workspaces
        backend = self.machine.docker
        assert backend is not None  # a node always runs on its own engine
        self.backend: DockerBackend = backend
        self.objects = NodeObjects(self.settings.data_dir / "tool-objects")
        self._limits_file = self.settings.data_dir / "tenant-limits.json"
        self._uploads: dict[str, _Upload] = {}
        self._gates: dict[str, asyncio.Future[None]] = {}  # exec_id -> its start gate
        self._started: asyncio.Task[None] | None = None
        self._background: list[asyncio.Task[Any]] = []
        self.ports = NodePorts(self.settings.data_dir / "ports")  # `port_open`
        self.processes = NodeProcesses(  # background processes: `process_start`
            self.backend, self.workspaces,
            lambda wanted: resolved(wanted, self.workspaces, self.objects), self.ready,
            self.ports.hub)
        self.kernels = NodeKernels(self)  # a session's kernels: `kernel_run`, `kernel_op`

    # -- life ---------------------------------------------------------------------------------

    async def ready(self) -> dict[str, str]:
        """Start once (disks, engine, reaper, idle release); who and where this node is."""
        if self._started is None:
            self._started = asyncio.ensure_future(self._start())
        await asyncio.shield(self._started)
        return {"id": self.node_id}

    async def _start(self) -> None:
        await asyncio.to_thread(self.cluster_addresses.refresh)  # before any call's egress
        self._background.append(asyncio.create_task(self.cluster_addresses.follow()))
        await asyncio.to_thread(self._load_limits)
        await self.machine.open_disks()
        self.machine.start_idle_release()
        await self.machine.start_engine()
        log.info("node_agent_ready", node=self.node_id, data_dir=str(self.settings.data_dir),
                 pid=os.getpid(), disks=self.workspaces.disks.enabled)

    async def pid(self) -> int:
        """The agent's process (tests kill it to lose the node)."""
        return os.getpid()

    async def close(self) -> None:
        await self.processes.close()
        await self.ports.close()
        for task in self._background:
            task.cancel()
        await self.machine.close()

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T | Failed:
        """A blocking disk or file operation on a worker thread; a `NaviError` as `Failed`."""
        try:
            await self.ready()
            return await asyncio.to_thread(fn, *args, **kwargs)
        except Exception as exc:
            return packed(exc)

    def _load_limits(self) -> None:
        with contextlib.suppress(FileNotFoundError, ValueError):
            found = json.loads(self._limits_file.read_text())
            self._tenant_limits.update({t: int(v) for t, v in found.items()
                                        if isinstance(v, int) and v > 0})

    def _keep_limit(self, tenant_id: str, limit: int | None) -> None:
        """The tenant's disk limit as its control plane last said it, kept across restarts."""
        if limit is None or self._tenant_limits.get(tenant_id) == limit:
            return
        self._tenant_limits[tenant_id] = limit
        tmp = self._limits_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._tenant_limits))
        os.replace(tmp, self._limits_file)

    # -- session disks ------------------------------------------------------------------------

    async def create(self, payload: bytes) -> None | Failed:
        def make() -> None:
            disk = parsed(CreateDisk, payload)
            self._keep_limit(disk.tenant, disk.tenant_disk_bytes)
            self.workspaces.create(disk.tenant, disk.session, uid=disk.uid,
                                   disk_bytes=disk.disk_bytes,
                                   tenant_disk_bytes=disk.tenant_disk_bytes)

        return await self._call(make)

    async def remove(self, payload: bytes) -> bool | Failed:
        def drop() -> bool:
            where = parsed(Where, payload)
            return self.workspaces.remove(where.tenant, where.session)

        return await self._call(drop)

    async def state(self, payload: bytes) -> str | Failed:
        """`active` while the session's disk is mounted here (in use lately), else `idle`."""
        try:
            where = parsed(Where, payload)
        except NaviError as exc:
            return packed(exc)
        return self.workspaces.state(where.tenant, where.session)

    # -- files --------------------------------------------------------------------------------

    async def files(self, payload: bytes) -> Any:
        """One file operation (stat, list, usage_bytes, mkdir, delete, move, and the
        searches grep, glob, tree) on a freshly opened workspace, closed again."""
        def run() -> Any:
            op = parsed(FileOp, payload)
            with self.workspaces.open(op.tenant, op.session, root=op.root) as ws:
                return getattr(ws, op.op)(*op.args, **op.kwargs)

        return await self._call(run)

    async def read(self, payload: bytes) -> AsyncIterator[Any]:
        """Streaming: `(size, mtime)` first (or a `Failed`), then chunks of <= READ_CHUNK."""
        try:
            await self.ready()
            op = parsed(ReadOp, payload)
            path, max_bytes = op.path, op.max_bytes
            ws = await asyncio.to_thread(self.workspaces.open, op.tenant, op.session,
                                         root=op.root)
        except Exception as exc:
            yield packed(exc)
            return
        try:
            try:
                reader = await asyncio.to_thread(ws.open_read, path)
                if max_bytes is not None and reader.size > max_bytes:
                    reader.close()
                    await asyncio.to_thread(ws.read_bytes, path, max_bytes=max_bytes)  # raises
            except Exception as exc:
                yield packed(exc)
                return
            yield (reader.size, reader.mtime)
            with reader:
                while chunk := await asyncio.to_thread(reader.read, READ_CHUNK):
                    yield chunk
        finally:
            ws.close()

    async def write_open(self, payload: bytes) -> tuple[str, str] | Failed:
        """An upload: its handle and the path as shown; feed it with `write`."""
        self._sweep_uploads()

        def begin() -> tuple[str, str]:
            op = parsed(WriteOpen, payload)
            ws = self.workspaces.open(op.tenant, op.session, root=op.root)
            try:
                writer = ws.writer(op.path, expected_size=op.expected_size,
                                   max_bytes=op.max_bytes)
            except BaseException:
                ws.close()
                raise
            handle = uuid.uuid4().hex
            self._uploads[handle] = _Upload(ws, writer, time.monotonic())
            return handle, writer.shown

        return await self._call(begin)

    async def write(self, handle: str, seq: int, data: bytes) -> None | Failed:
        """Chunk number `seq` of an upload (they may arrive together: written in order)."""
        if not (isinstance(seq, int) and isinstance(data, bytes)):
            return Failed("InvalidInput", "an upload chunk is a number and bytes")
        upload = self._uploads.get(handle) if isinstance(handle, str) else None
        if upload is None:
            return Failed("NotFound", "no such upload (aborted, or idle too long)")
        async with upload.turn:
            await upload.turn.wait_for(lambda: upload.next_seq == seq)
            upload.used = time.monotonic()
            if upload.failed is None:
                try:  # on the loop: a <= 1 MiB write to the page cache costs less than a
                    upload.writer.write(data)  # thread hop
                except Exception as exc:
                    upload.failed = packed(exc)
            upload.next_seq += 1
            upload.turn.notify_all()
            return upload.failed

    async def write_end(self, handle: str, commit: bool) -> Any:
        """Commit (the `FileEntry`) or abort an upload; its workspace is closed."""
        upload = self._uploads.pop(handle, None) if isinstance(handle, str) else None
        if upload is None:
            return Failed("NotFound", "no such upload (aborted, or idle too long)")
        failed = upload.failed

        def end() -> Any:
            try:
                if failed is not None:
                    upload.writer.abort()
                    return failed
                if commit:
                    return upload.writer.commit()
                upload.writer.abort()
                return None
            finally:
                upload.workspace.close()

        return await self._call(end)

    def _sweep_uploads(self) -> None:
        now = time.monotonic()
        for handle, upload in list(self._uploads.items()):
            if now - upload.used > WRITER_IDLE_S:
                del self._uploads[handle]
                with contextlib.suppress(Exception):
                    upload.writer.abort()
                upload.workspace.close()

    # -- calls --------------------------------------------------------------------------------

    async def run(self, payload: bytes) -> AsyncIterator[list[OutputChunk | ExecResult] | Failed]:
        """Streaming: the call's output as it comes, then its `ExecResult` (or a `Failed`),
        in batches: what comes within `COALESCE_S` of a chunk goes in one message (a quick
        call is one message: its output and its result). The request (`RunOnNode`) names
        what to mount; the paths are this node's. `gated`: the container is prepared, and
        nothing runs in it until `open_gate(exec_id, True)` says the call's audit intent is
        durable on the control plane (False: removed, nothing ran). Closing the stream
        early kills the call."""
        lease: Workspace | None = None
        call: asyncio.Task[ExecResult] | None = None
        exec_id: str | None = None
        try:
            await self.ready()
            wanted = parsed(RunOnNode, payload)
            exec_id = wanted.request.exec_id
            gate = self._gate(exec_id) if wanted.gated else None
            request = await asyncio.to_thread(resolved, wanted, self.workspaces,
                                              self.objects)
            request = self.ports.hub.for_call(request.session, request)  # its ports here
            if request.workspace is not None or request.tmp is not None:
                lease = await asyncio.to_thread(self.workspaces.open, request.tenant,
                                                request.session)
            output: Feed[OutputChunk] = Feed()
            call = output.follow(asyncio.create_task(
                self.backend.run(request, output.put, before_start=gate)))
            async for batch, last in output.batches(COALESCE_S):
                if last:
                    yield [*batch, relative(request, call.result(), self.workspaces)]
                    return
                yield list(batch)
        except Exception as exc:
            yield packed(exc)
        finally:
            if exec_id is not None:
                self._gates.pop(exec_id, None)
            if call is not None and not call.done():
                call.cancel()
                with contextlib.suppress(BaseException):
                    await call
            if lease is not None:
                lease.close()

    def _gate(self, exec_id: str) -> asyncio.Future[None]:
        """The call's start gate, made by whichever of `run` and `open_gate` comes first."""
        gate = self._gates.get(exec_id)
        if gate is None:
            gate = self._gates[exec_id] = asyncio.get_running_loop().create_future()
            gate.add_done_callback(lambda f: f.exception() if not f.cancelled() else None)
        return gate

    async def open_gate(self, exec_id: str, durable: bool) -> None:
        """The control plane's word on a gated call: its intent is durable (run it), or it
        could not be written (run nothing). A word for no call is forgotten in a minute."""
        gate = self._gate(exec_id)
        if not gate.done():
            if durable:
                gate.set_result(None)
            else:
                gate.set_exception(AuditUnavailable("the call's audit intent was not written"))
        asyncio.get_running_loop().call_later(GATE_KEPT_S, self._gates.pop, exec_id, None)

    async def kill(self, exec_id: str) -> None:
        if isinstance(exec_id, str):
            await self.backend.kill(exec_id)

    async def release_session(self, session_id: str) -> None:
        if isinstance(session_id, str):
            with contextlib.suppress(Exception):
                await self.backend.release_session(session_id)

    # -- background processes (`runtime.nodes.agent.processes`) ------------------------------

    async def process_start(self, payload: bytes) -> AsyncIterator[Any]:
        """Streaming: the container's id, output batches, a `ProcessEnd` (or a `Failed`)."""
        async for item in self.processes.start(payload):
            yield item

    async def process_act(self, payload: bytes) -> None | Failed:
        """Input, EOF or a signal for a running process (`ProcessAct`)."""
        return await self.processes.act(payload)

    async def port_open(self, payload: bytes) -> AsyncIterator[Any]:
        """Streaming: a declared port's bytes (`runtime.nodes.agent.ports`)."""
        async for item in self.ports.open(payload):
            yield item

    async def port_send(self, handle: str, data: bytes) -> None | Failed:
        return await self.ports.send(handle, data)

    async def kernel_run(self, payload: bytes) -> AsyncIterator[Any]:  # NodeKernels.run
        async for item in self.kernels.run(payload):
            yield item

    async def kernel_op(self, payload: bytes) -> Any:  # list, stop, idle save...
        return await self.kernels.op(payload)
