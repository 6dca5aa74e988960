"""The node agent: a Ray actor that owns one execution node's engine, disks and warm pool.

Why: with a cluster, a session's files and containers live on one node; the control plane
keeps the API, policy, audit and store and reaches the node only through this actor
(`runtime.nodes.remote.RemoteNode` is its other end). It is the same hardened machinery as
on one machine, reused as it is: `DockerBackend` (the node's engine from DOCKER_HOST, its
images, warm pool, egress proxy, reaper) and `Workspaces` (session disks under the node's
own data dir, the mount guard, idle release). Its egress proxies also refuse the cluster's
own machines (`runtime.nodes.cluster_addresses`), read from Ray before it takes work.

The agent takes work only through Ray, which admits only holders of the cluster's token
(no dashboard, no job API run). Errors go back as `Failed` values (`runtime.nodes.failures`).
Files move in bounded chunks (`CHUNK`, `READ_CHUNK`): reads are a streaming generator,
writes a handle fed numbered chunks (written in order), committed or aborted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from runtime.config import Settings
from runtime.errors import AuditUnavailable, InvalidInput
from runtime.logging import get_logger
from runtime.nodes.cluster_addresses import ClusterAddresses
from runtime.nodes.failures import Failed, packed
from runtime.sandbox.docker.backend import DockerBackend
from runtime.sandbox.instance import load_instance_id
from runtime.sandbox.models import ExecRequest, ExecResult, OutputChunk
from runtime.streaming import Feed
from runtime.workspace import AtomicWriter, Workspace, Workspaces
from runtime.workspace.activity import call_on_loop, release_idle
from runtime.workspace.tmpdir import Root

log = get_logger(__name__)
T = TypeVar("T")

CHUNK = 1024 * 1024  # the most bytes an upload sends a message (each one a Ray task here)
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


class NodeAgent:
    """Made by `runtime.nodes.remote.agent_for` as a detached, named async Ray actor pinned
    to its node. `data_dir`: the node's Navi data dir (default NAVI_DATA_DIR of the node);
    `disks`: session disks (loop-mounted images) on, off, or None: when the node can."""

    def __init__(self, node_id: str, data_dir: str | None = None,
                 disks: bool | None = None) -> None:
        self.node_id = node_id
        self.settings = Settings() if data_dir is None else Settings(data_dir=Path(data_dir))
        self.workspaces = Workspaces.from_settings(self.settings)
        if disks is not None:
            self.workspaces.disks.enabled = disks and self.workspaces.disks.enabled
        self.backend = DockerBackend.from_settings(
            self.settings, instance_id=load_instance_id(self.settings.data_dir), warm_pool=True)
        self.cluster_addresses = ClusterAddresses()
        self.backend.egress_denied = self.cluster_addresses
        self._uploads: dict[str, _Upload] = {}
        self._gates: dict[str, asyncio.Future[None]] = {}  # exec_id -> its start gate
        self._started: asyncio.Task[None] | None = None
        self._background: list[asyncio.Task[Any]] = []

    # -- life ---------------------------------------------------------------------------------

    async def ready(self) -> dict[str, str]:
        """Start once (disks, engine, reaper, idle release); who and where this node is."""
        if self._started is None:
            self._started = asyncio.ensure_future(self._start())
        await asyncio.shield(self._started)
        return {"id": self.node_id, "workspaces_root": str(self.workspaces.root)}

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.to_thread(self.cluster_addresses.refresh)  # before any call's egress
        self._background.append(asyncio.create_task(self.cluster_addresses.follow()))
        await asyncio.to_thread(self.workspaces.start)
        self.workspaces.drop_containers = lambda session_id: call_on_loop(
            loop, lambda: self.backend.release_session(session_id))
        self.backend.may_launch = self.workspaces.may_launch  # no refill for a released disk
        await self.backend.start()
        reaper = self.backend.reaper()
        await reaper.reconcile_startup()
        self._background += [reaper.start_periodic(self.settings.reaper_interval_s),
                             asyncio.create_task(release_idle(self.workspaces))]
        log.info("node_agent_ready", node=self.node_id, data_dir=str(self.settings.data_dir),
                 pid=os.getpid(), disks=self.workspaces.disks.enabled)

    async def pid(self) -> int:
        """The agent's process (tests kill it to lose the node)."""
        return os.getpid()

    async def close(self) -> None:
        for task in self._background:
            task.cancel()
        await self.backend.close()
        await asyncio.to_thread(self.workspaces.close)

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T | Failed:
        """A blocking disk or file operation on a worker thread; a `NaviError` as `Failed`."""
        try:
            await self.ready()
            return await asyncio.to_thread(fn, *args, **kwargs)
        except Exception as exc:
            return packed(exc)

    # -- session disks ------------------------------------------------------------------------

    async def create(self, tenant_id: str, session_id: str, uid: int | None,
                     disk_bytes: int | None, tenant_disk_bytes: int | None) -> str | Failed:
        made = await self._call(self.workspaces.create, tenant_id, session_id, uid=uid,
                                disk_bytes=disk_bytes, tenant_disk_bytes=tenant_disk_bytes)
        return made if isinstance(made, Failed) else str(made)

    async def remove(self, tenant_id: str, session_id: str) -> bool | Failed:
        return await self._call(self.workspaces.remove, tenant_id, session_id)

    async def verify(self, tenant_id: str, session_id: str) -> str | Failed:
        found = await self._call(self.workspaces.verify, tenant_id, session_id)
        return found if isinstance(found, Failed) else str(found)

    async def tmp_path(self, tenant_id: str, session_id: str) -> str | Failed:
        found = await self._call(self.workspaces.tmp_path, tenant_id, session_id)
        return found if isinstance(found, Failed) else str(found)

    # -- files --------------------------------------------------------------------------------

    async def files(self, tenant_id: str, session_id: str, root: Root, op: str,
                    *args: Any, **kwargs: Any) -> Any:
        """One file operation (stat, list, usage_bytes, mkdir, delete, move, and the
        searches grep, glob, tree) on a freshly opened workspace, closed again."""
        if op not in ("stat", "list", "usage_bytes", "mkdir", "delete", "move", "grep", "glob",
                      "tree"):
            return Failed("InvalidInput", f"no file operation {op!r}")

        def run() -> Any:
            with self.workspaces.open(tenant_id, session_id, root=root) as ws:
                return getattr(ws, op)(*args, **kwargs)

        return await self._call(run)

    async def read(self, tenant_id: str, session_id: str, root: Root, path: str,
                   max_bytes: int | None = None) -> AsyncIterator[Any]:
        """Streaming: `(size, mtime)` first (or a `Failed`), then chunks of <= READ_CHUNK."""
        try:
            await self.ready()
            ws = await asyncio.to_thread(self.workspaces.open, tenant_id, session_id, root=root)
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

    async def write_open(self, tenant_id: str, session_id: str, root: Root, path: str,
                         expected_size: int | None, max_bytes: int | None
                         ) -> tuple[str, str] | Failed:
        """An upload: its handle and the path as shown; feed it with `write`."""
        self._sweep_uploads()

        def begin() -> tuple[str, str]:
            ws = self.workspaces.open(tenant_id, session_id, root=root)
            try:
                writer = ws.writer(path, expected_size=expected_size, max_bytes=max_bytes)
            except BaseException:
                ws.close()
                raise
            handle = uuid.uuid4().hex
            self._uploads[handle] = _Upload(ws, writer, time.monotonic())
            return handle, writer.shown

        return await self._call(begin)

    async def write(self, handle: str, seq: int, data: bytes) -> None | Failed:
        """Chunk number `seq` of an upload (they may arrive together: written in order)."""
        upload = self._uploads.get(handle)
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
        upload = self._uploads.pop(handle, None)
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

    async def run(self, request: ExecRequest, gated: bool = False
                  ) -> AsyncIterator[list[OutputChunk | ExecResult] | Failed]:
        """Streaming: the call's output as it comes, then its `ExecResult` (or a `Failed`),
        in batches: what comes within `COALESCE_S` of a chunk goes in one message (a quick
        call is one message: its output and its result). `gated`: the container is
        prepared, and nothing runs in it until `open_gate(exec_id, True)` says the call's
        audit intent is durable on the control plane (False: removed, nothing ran).
        Closing the stream early kills the call."""
        lease: Workspace | None = None
        call: asyncio.Task[ExecResult] | None = None
        gate = self._gate(request.exec_id) if gated else None
        try:
            await self.ready()
            if request.workspace is not None or request.tmp is not None:
                lease = await self._lease(request)
            output: Feed[OutputChunk] = Feed()
            call = output.follow(asyncio.create_task(
                self.backend.run(request, output.put, before_start=gate)))
            async for batch, last in output.batches(COALESCE_S):
                if last:
                    yield [*batch, call.result()]
                    return
                yield list(batch)
        except Exception as exc:
            yield packed(exc)
        finally:
            self._gates.pop(request.exec_id, None)
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

    async def _lease(self, request: ExecRequest) -> Workspace:
        """The session's disk mounted (and kept so for the call) and its paths checked: a
        call mounts only its own session's workspace and /tmp from this node's disks."""
        tenant, session = request.tenant, request.session
        ws = await asyncio.to_thread(self.workspaces.open, tenant, session)
        wanted = {request.workspace: self.workspaces.path(tenant, session),
                  request.tmp: self.workspaces.tmp_path(tenant, session)}
        if any(given is not None and given != path for given, path in wanted.items()):
            ws.close()
            raise InvalidInput("a call may mount only its own session's files")
        return ws

    async def kill(self, exec_id: str) -> None:
        await self.backend.kill(exec_id)

    async def release_session(self, session_id: str) -> None:
        with contextlib.suppress(Exception):
            await self.backend.release_session(session_id)
