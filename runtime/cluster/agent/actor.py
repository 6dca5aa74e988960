"""The node agent: a Ray actor that owns one execution node's engine, disks and warm pool.

Why: with a cluster, a session's files and containers live on one node; the control plane
keeps the API, policy, audit and store and reaches the node only through this actor
(`runtime.cluster.control.remote.RemoteNode` is its other end). It is the same hardened machinery as
on one machine, started the same way (`runtime.nodes.machine.Machine`): `DockerBackend`
(the node's engine from DOCKER_HOST, its images, warm pool, egress proxy, reaper) and
`Workspaces` (session disks under the node's own data dir, the mount guard, idle release).
Its egress proxies also refuse the cluster's own machines
(`runtime.cluster.agent.cluster_addresses`), read from Ray before it takes work.

The agent takes work only through Ray, which admits only holders of the cluster's token
(no dashboard, no job API run), and its exec channel (`runtime.cluster.agent.channel`:
calls without a Ray task each, after the same token's proof), and even then trusts no
request: each is the JSON of a
`runtime.nodes.wire` model, validated here; it names the session and what to mount, and
the agent resolves that to its own directories (a path named in a request is refused).
A tool's code comes by content hash into the node's tool-object directory
(`runtime.cluster.agent.objects`). The tenant disk limits it was told are kept in its data
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
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

from runtime.cluster.agent.asks import ElsewhereAsks
from runtime.cluster.agent.channel import Items, NodeChannel, open_channel
from runtime.cluster.agent.cluster_addresses import ClusterAddresses
from runtime.cluster.agent.gates import Gates
from runtime.cluster.agent.kernels import NodeKernels
from runtime.cluster.agent.objects import NodeObjects
from runtime.cluster.agent.ports import NodePorts
from runtime.cluster.agent.processes import NodeProcesses
from runtime.cluster.agent.resolve import relative, resolved, resolved_and_leased
from runtime.cluster.agent.restore import NodeRestores
from runtime.cluster.agent.snapshots import NodeSnapshots, streamed
from runtime.cluster.agent.uploads import NodeUploads
from runtime.config import Settings
from runtime.errors import NaviError
from runtime.logging import get_logger
from runtime.nodes.failures import Failed, packed
from runtime.nodes.machine import Machine
from runtime.nodes.wire import (
    CreateDisk,
    FileOp,
    HeldBytes,
    ReadOp,
    RunOnNode,
    TenantOf,
    Where,
    parsed,
)
from runtime.sandbox.docker.backend import DockerBackend
from runtime.sandbox.models import ExecResult, OutputChunk
from runtime.streaming import Feed
from runtime.workspace import Workspace

log = get_logger(__name__)
T = TypeVar("T")

READ_CHUNK = 1024 * 1024  # the most bytes a read streams a message
COALESCE_S = 0.005  # output within this of a chunk (or the end) goes in the same message


def actor_name(node_id: str) -> str:
    return f"navi-node-{node_id}"


class NodeAgent:
    """Made by `runtime.cluster.control.remote.agent_for` as a detached, named async Ray
    actor pinned to its node. `data_dir`: the node's Navi data dir (default NAVI_DATA_DIR of
    the node); `disks`: session disks (loop-mounted images) on, off, or None: when the node can."""

    def __init__(self, node_id: str, data_dir: str | None = None,
                 disks: bool | None = None) -> None:
        self.node_id = node_id
        self.settings = Settings() if data_dir is None else Settings(data_dir=Path(data_dir))
        self.cluster_addresses = ClusterAddresses()
        self._tenant_limits: dict[str, int] = {}  # what its control plane last said
        self.asks = ElsewhereAsks()  # its mounts and copies count the tenant's bytes elsewhere
        self.machine = Machine(  # as `navi serve` alone starts it
            self.settings, disks=disks, tenant_limit=self._tenant_limits.get,
            egress_denied=self.cluster_addresses, elsewhere=self.asks.ask)
        self.workspaces = self.machine.workspaces
        backend = self.machine.docker
        assert backend is not None  # a node always runs on its own engine
        self.backend: DockerBackend = backend
        self.objects = NodeObjects(self.settings.data_dir / "tool-objects")
        self._limits_file = self.settings.data_dir / "tenant-limits.json"
        self.uploads = NodeUploads(self.workspaces)  # `write_open`, `write`, `write_end`
        self.snaps = NodeSnapshots(self.workspaces, self.settings.data_dir / "scratch")
        self.restores = NodeRestores(self.workspaces)  # `restore_open`, ...
        self.gates = Gates()  # gated calls' start gates
        self.channel: NodeChannel | None = None  # calls without a Ray task each
        self.channel_address = ""
        self._started: asyncio.Task[None] | None = None
        self._background: list[asyncio.Task[Any]] = []
        self.ports = NodePorts(self.settings.data_dir / "ports")  # `port_open`
        self.processes = NodeProcesses(  # background processes: `process_start`
            self.backend, self.workspaces,
            lambda wanted: resolved(wanted, self.workspaces, self.objects), self.ready,
            self.ports.hub, self.settings.data_dir / "process-logs")
        self.kernels = NodeKernels(  # a session's kernels: `kernel_run`, `kernel_op`
            self.workspaces, self.backend, self.ports.hub, self.gates.get, self.ready)

    # -- life ---------------------------------------------------------------------------------

    async def ready(self) -> dict[str, str]:
        """Start once (disks, engine, reaper, idle release); who and where this node is."""
        if self._started is None:
            self._started = asyncio.ensure_future(self._start())
        await asyncio.shield(self._started)
        return {"id": self.node_id, "channel": self.channel_address}

    async def _start(self) -> None:
        await asyncio.to_thread(self.cluster_addresses.refresh)  # before any call's egress
        self._background.append(asyncio.create_task(self.cluster_addresses.follow()))
        await asyncio.to_thread(self._load_limits)
        await self.machine.open_disks()
        self.machine.start_idle_release()
        await self.machine.start_engine()
        self.channel, self.channel_address = await open_channel(
            self.settings.node_channel_port, self.run, self.gates.open)
        log.info("node_agent_ready", node=self.node_id, data_dir=str(self.settings.data_dir),
                 pid=os.getpid(), disks=self.workspaces.disks.enabled,
                 channel=self.channel_address)

    async def pid(self) -> int:
        """The agent's process (tests kill it to lose the node)."""
        return os.getpid()

    async def close(self) -> None:
        if self.channel is not None:
            await self.channel.close()
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
            self.asks.told(disk.tenant, disk.elsewhere.bytes())
            self.workspaces.create(disk.tenant, disk.session, uid=disk.uid,
                                   disk_bytes=disk.disk_bytes,
                                   tenant_disk_bytes=disk.tenant_disk_bytes,
                                   elsewhere=disk.elsewhere.bytes())

        return await self._call(make)

    async def tenant_bytes(self, payload: bytes) -> bytes | Failed:
        """What a tenant holds here as its disk quota counts it (`HeldBytes` as JSON): the
        control plane adds it up for a session disk made on another machine."""
        def count() -> bytes:
            tenant = parsed(TenantOf, payload).tenant
            return HeldBytes.of(self.workspaces.tenant_bytes(tenant)).model_dump_json().encode()

        return await self._call(count)

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
        self.uploads.sweep()
        return await self._call(self.uploads.open, payload)

    async def write(self, handle: str, seq: int, data: bytes) -> None | Failed:
        return await self.uploads.write(handle, seq, data)

    async def write_end(self, handle: str, commit: bool) -> Any:
        """Commit (the `FileEntry`) or abort an upload; its workspace is closed."""
        upload = self.uploads.take(handle)
        if upload is None:
            return Failed("NotFound", "no such upload (aborted, or idle too long)")
        return await self._call(self.uploads.end, upload, commit)

    # -- snapshots, forks, backup and restore of its session disks ---------------------------

    async def snapshots(self, payload: bytes) -> Any:
        """A snapshot or fork operation (`runtime.nodes.snapshot_wire.SnapshotOp`)."""
        return await self._call(self.snaps.handle, payload)

    async def backup_disk(self, payload: bytes) -> AsyncIterator[Any]:
        """Streaming: a session's disk images for `navi backup` (`NodeSnapshots.stream`)."""
        await self.ready()
        async for item in streamed(self.snaps.stream(payload)):
            yield item

    async def restore_open(self, payload: bytes) -> Any:
        """`navi restore`: a handle to send one image of a backup to (`NodeRestores`)."""
        return await self._call(self.restores.open, payload)

    async def restore_write(self, handle: str, offset: int, data: bytes) -> Any:
        return await self._call(self.restores.write, handle, offset, data)

    async def restore_end(self, handle: str, commit: bool) -> Any:
        """Phase 1 of `navi restore`: the image checked and staged (or dropped)."""
        return await self._call(self.restores.end, handle, commit)

    async def restore_finish(self, payload: bytes) -> Any:
        """Phase 2: the restore's staged images put in place, or all dropped."""
        return await self._call(self.restores.finish, payload)

    # -- calls --------------------------------------------------------------------------------

    async def run(self, payload: bytes) -> Items:
        """Streaming (and the exec channel's calls, `runtime.cluster.agent.channel`): the
        call's output as it comes, then its `ExecResult` (or a `Failed`),
        in batches: what comes within `COALESCE_S` of a chunk goes in one message (a quick
        call is one message: its output and its result). The request (`RunOnNode`) names
        what to mount; the paths are this node's. `gated`: the container is prepared, and
        nothing runs in it until `open_gate(exec_id, True)` says the call's audit intent is
        durable on the control plane (False: removed, nothing ran). Closing the stream
        early kills the call. The backend's after-call work (the used warm container's
        removal, the next one's launch: a burst of engine CPU) waits until the stream has
        ended, so it does not slow the result's way back."""
        lease: Workspace | None = None
        call: asyncio.Task[ExecResult] | None = None
        exec_id: str | None = None
        settled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        try:
            await self.ready()
            wanted = parsed(RunOnNode, payload)
            exec_id = wanted.request.exec_id
            gate = self.gates.get(exec_id) if wanted.gated else None
            request, lease = await asyncio.to_thread(resolved_and_leased, wanted,
                                                     self.workspaces, self.objects)
            request = self.ports.hub.for_call(request.session, request)  # its ports here
            output: Feed[OutputChunk] = Feed()
            call = output.follow(asyncio.create_task(
                self.backend.run(request, output.put, before_start=gate, settled=settled)))
            async for batch, last in output.batches(COALESCE_S):
                if last:
                    yield [*batch, relative(request, call.result(), self.workspaces)]
                    return
                yield list(batch)
        except Exception as exc:
            yield packed(exc)
        finally:
            if exec_id is not None:
                self.gates.drop(exec_id)
            if call is not None and not call.done():
                call.cancel()
                with contextlib.suppress(BaseException):
                    await call
            if lease is not None:
                lease.close()
            settled.set_result(None)

    async def channel_calls(self, drop: bool = False) -> int:
        """Calls taken over the exec channel so far; `drop`: its connections closed first
        (their calls killed; the control plane connects again on its next call)."""
        if self.channel is None:
            return -1
        if drop:
            self.channel.drop_peers()
        return self.channel.calls

    async def open_gate(self, exec_id: str, durable: bool) -> None:
        """The control plane's word on a gated call (`Gates.open`)."""
        self.gates.open(exec_id, durable)

    async def kill(self, exec_id: str) -> None:
        if isinstance(exec_id, str):
            await self.backend.kill(exec_id)

    async def release_session(self, session_id: str) -> None:
        if isinstance(session_id, str):
            with contextlib.suppress(Exception):
                await self.backend.release_session(session_id)

    # -- background processes (`runtime.cluster.agent.processes`) ------------------------------

    async def process_start(self, payload: bytes) -> AsyncIterator[Any]:
        """Streaming: the container's id, output batches, a `ProcessEnd` (or a `Failed`)."""
        async for item in self.processes.start(payload):
            yield item

    async def process_act(self, payload: bytes) -> None | Failed:
        """Input, EOF or a signal for a running process (`ProcessAct`)."""
        return await self.processes.act(payload)

    async def process_attach(self, payload: bytes) -> AsyncIterator[Any]:
        """Streaming, for a restarted control plane (`ProcessAttach`): `ProcessAttached`,
        the output from its offset, a `ProcessEnd` (or a `Failed`)."""
        async for item in self.processes.attach(payload):
            yield item

    async def port_open(self, payload: bytes) -> AsyncIterator[Any]:
        """Streaming: a declared port's bytes (`runtime.cluster.agent.ports`)."""
        async for item in self.ports.open(payload):
            yield item

    async def port_send(self, handle: str, data: bytes) -> None | Failed:
        return await self.ports.send(handle, data)

    async def kernel_run(self, payload: bytes) -> AsyncIterator[Any]:  # NodeKernels.run
        async for item in self.kernels.run(payload):
            yield item

    async def kernel_op(self, payload: bytes) -> Any:  # list, stop, idle save...
        return await self.kernels.op(payload)

    # -- what a tenant holds elsewhere, asked of the control plane (`agent.asks`) ---------------

    async def elsewhere_asks(self) -> AsyncIterator[bytes]:  # streaming: the node's questions
        async for question in self.asks.listen():
            yield question

    async def elsewhere_answer(self, payload: bytes) -> None | Failed:  # `ElsewhereAnswer`
        return await self._call(self.asks.answer, payload)
