"""A node agent seen from the control plane: `SessionNode` over Ray.

Why: the control plane keeps API, policy, audit and store; a session that lives on another
machine has its disk, files and containers there, in that node's agent
(`runtime.cluster.agent.NodeAgent`). `RemoteNode` is the same interface as `LocalNode`, so no
caller knows the difference. Nothing of the node's file system crosses the hop: requests
are the JSON of `runtime.nodes.wire` models naming the session and what to mount; a file a
call mounts (a user tool's copy) travels by its content hash, its bytes only the first time.

- Files: `runtime.cluster.control.files` (one actor call per operation, chunked streams).
- Calls: the job is sent at once with a start gate; the node prepares the container (image,
  spec, warm take) while the write-ahead audit intent is written here, and runs nothing in
  it until `open_gate(exec_id, True)`, sent only once the intent is durable (False: the
  container is removed, nothing ran). So the intent's fsync overlaps the preparation as on
  one machine, for one more message. The node streams the output back as it comes, then
  the result. The node's after-call work (the used warm container's removal, the next
  one's launch) waits until that stream has ended, not for the outcome record (`settled`
  stays on this side): done sooner, its engine burst slowed the result's way back.
- Calls go over the node's exec channel while it has one (`runtime.cluster.control.channel`:
  one standing connection, no Ray task per call and no streaming generator), else by Ray.
- A dead or unreachable agent is `NodeUnavailable` (`runtime.cluster.control.hop`).

Blocking methods (disk, files) call `ray.get` and must run on a worker thread, as
`Workspaces` always did; the backend is async (ObjectRefs are awaited).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from runtime.cluster.agent.actor import NodeAgent, actor_name
from runtime.cluster.control.asks import Count, answer_asks
from runtime.cluster.control.channel import MAX_OUTPUT, MAX_REQUEST, NodeChannel, by_channel
from runtime.cluster.control.files import RemoteFiles
from runtime.cluster.control.hop import LOST, Hop, batches, open_when_durable, wire
from runtime.cluster.control.kernels import RemoteKernels
from runtime.cluster.control.processes import RemoteProcesses
from runtime.cluster.control.snapshots import RemoteSnapshots
from runtime.errors import InvalidInput
from runtime.nodes.channel_wire import read_token
from runtime.nodes.wire import (
    MAX_OBJECT_BYTES,
    SESSION_TMP,
    SESSION_WORKSPACE,
    CreateDisk,
    HeldBytes,
    ObjectMount,
    RunOnNode,
    TenantOf,
    Where,
    parsed,
)
from runtime.sandbox.backend import OutputCallback
from runtime.sandbox.models import ExecRequest, ExecResult, OutputChunk
from runtime.workspace.disk import NOTHING, TenantBytes
from runtime.workspace.tmpdir import Root

NAMESPACE = "navi"


class RemoteBackend:
    """`SandboxBackend` of a node: runs go to its agent, output streams back; over the
    node's exec channel while it has one (`runtime.cluster.control.channel`), else by Ray."""

    def __init__(self, hop: Hop, channel: NodeChannel | None = None) -> None:
        self._hop = hop
        self._channel = channel
        self._held: set[str] = set()  # objects the node has (sent with a call that ran)

    async def _objects(self, request: ExecRequest) -> list[ObjectMount]:
        """The call's read-only file mounts as content hashes; their bytes only while the
        node may not have them yet."""
        if not request.mounts:
            return []
        found = await asyncio.to_thread(_read_all, [m.source for m in request.mounts])
        out = []
        for mount, data in zip(request.mounts, found, strict=True):
            if not mount.read_only:
                raise InvalidInput(f"extra mount {mount.target!r} must be read-only")
            sha = hashlib.sha256(data).hexdigest()
            out.append(ObjectMount(sha256=sha, target=mount.target,
                                   data=None if sha in self._held else data))
        return out

    async def run(
        self, request: ExecRequest, on_output: OutputCallback | None = None, *,
        before_start: Awaitable[object] | None = None,
        settled: Awaitable[object] | None = None,
    ) -> ExecResult:
        link = self._hop
        gated = before_start is not None
        call = RunOnNode.of(request, await self._objects(request), gated)
        payload = wire(call)
        if (self._channel is not None and len(payload) <= MAX_REQUEST
                and request.limits.output_bytes <= MAX_OUTPUT
                and (on := await self._channel.call(payload)) is not None):
            result = await by_channel(link, on, request.exec_id, on_output, before_start)
            self._held.update(o.sha256 for o in call.objects)
            return result
        try:
            stream: Any = link.actor.run.options(num_returns="streaming").remote(payload)
        except LOST as exc:
            raise link.lost(exc) from None
        await open_when_durable(link, stream, request.exec_id, before_start)
        try:
            async with contextlib.aclosing(batches(link, stream)) as messages:
                async for batch in messages:  # chunks, then maybe the result
                    for item in batch:
                        if isinstance(item, OutputChunk):
                            if on_output is not None:
                                await on_output(item)
                        elif isinstance(item, ExecResult):
                            self._held.update(o.sha256 for o in call.objects)
                            return item
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                ray.cancel(stream)
            raise
        raise link.lost(RuntimeError("the run ended without a result"))

    async def kill(self, exec_id: str) -> None:
        await self._hop.wait(self._hop.actor.kill.remote(exec_id))

    async def release_session(self, session: str) -> None:
        await self._hop.wait(self._hop.actor.release_session.remote(session))

    async def close(self) -> None:
        """The agent outlives this control plane: nothing to close."""


class RemoteNode:
    """`SessionNode` of a node agent (`agent_for` finds or makes one). It knows nothing of
    the node's directories: `verify` and `tmp_path` return names the agent resolves."""

    def __init__(self, node_id: str, actor: Any, *,
                 on_lost: Callable[[str], None] | None = None,
                 channel: NodeChannel | None = None) -> None:
        self._hop = Hop(node_id, actor, on_lost)
        self._backend = RemoteBackend(self._hop, channel)
        self.snapshots = RemoteSnapshots(self._hop)  # runtime.sessions.snapshots uses it
        self.kernels = RemoteKernels(self._hop)  # runtime.kernels.on_nodes uses it
        self.processes = RemoteProcesses(self._hop)  # runtime.processes.on_node uses it

    @property
    def id(self) -> str:
        return self._hop.node_id

    @property
    def backend(self) -> RemoteBackend:
        return self._backend

    def create(self, tenant_id: str, session_id: str, *, uid: int | None = None,
               disk_bytes: int | None = None, tenant_disk_bytes: int | None = None,
               elsewhere: TenantBytes = NOTHING) -> Path:
        self._hop.call("create", wire(CreateDisk(
            tenant=tenant_id, session=session_id, uid=uid, disk_bytes=disk_bytes,
            tenant_disk_bytes=tenant_disk_bytes, elsewhere=HeldBytes.of(elsewhere))))
        return SESSION_WORKSPACE

    def tenant_bytes(self, tenant_id: str) -> TenantBytes:
        """What the tenant holds on the node (its answer checked as a request would be)."""
        answer = self._hop.call("tenant_bytes", wire(TenantOf(tenant=tenant_id)))
        return parsed(HeldBytes, answer).bytes()

    def remove(self, tenant_id: str, session_id: str) -> bool:
        return bool(self._hop.call("remove", wire(Where(tenant=tenant_id, session=session_id))))

    def verify(self, tenant_id: str, session_id: str) -> Path:
        """The workspace's name, no hop: the agent resolves and verifies it (and mounts the
        disk) itself before a call runs with it."""
        Where(tenant=tenant_id, session=session_id)  # malformed ids fail here already
        return SESSION_WORKSPACE

    def tmp_path(self, tenant_id: str, session_id: str) -> Path:
        Where(tenant=tenant_id, session=session_id)
        return SESSION_TMP

    def state(self, tenant_id: str, session_id: str) -> str:
        """`active` while the session's disk is mounted on its node, else `idle`."""
        return str(self._hop.call("state", wire(Where(tenant=tenant_id, session=session_id))))

    def open(self, tenant_id: str, session_id: str, *, root: Root = "workspace"
             ) -> RemoteFiles:
        return RemoteFiles(self._hop, tenant_id, session_id, root)

    async def answer_asks(self, count: Count) -> None:
        """Its questions answered (`runtime.cluster.control.asks`) until it is lost."""
        await answer_asks(self._hop, self, count)


def _read_all(paths: list[Path]) -> list[bytes]:
    """Files this side mounts into a call (a user tool's copy), read to travel by hash."""
    out = []
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            raise InvalidInput(f"mount source {path} does not exist or is not a regular file "
                               "or directory") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a device, a directory
            os.close(fd)
            raise InvalidInput(f"mount source {path} must be a regular file or directory "
                               "(on a node: a regular file)")
        with os.fdopen(fd, "rb") as f:
            data = f.read(MAX_OBJECT_BYTES + 1)
        if len(data) > MAX_OBJECT_BYTES:
            raise InvalidInput(f"a file a call mounts on a node is at most {MAX_OBJECT_BYTES} "
                               "bytes")
        out.append(data)
    return out


def agent_for(node_id: str, ray_node_id: str, *, on_lost: Callable[[str], None] | None = None,
              data_dir: str | None = None, disks: bool | None = None) -> RemoteNode:
    """The node's agent, found by name or made (detached, pinned to the Ray node, on its
    `navi_node` resource) and started; blocking (call it on a worker thread, with Ray
    joined in namespace "navi")."""
    actor: Any = ray.remote(NodeAgent).options(
        name=actor_name(node_id), namespace=NAMESPACE, lifetime="detached",
        get_if_exists=True, num_cpus=0, resources={"navi_node": 0.01}, max_restarts=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(ray_node_id, soft=False),
    ).remote(node_id, data_dir, disks)
    ready = Hop(node_id, actor, on_lost).get(actor.ready.remote())
    return RemoteNode(node_id, actor, on_lost=on_lost, channel=channel_to(node_id, ready))


def channel_to(node_id: str, ready: Any) -> NodeChannel | None:
    """The node's exec channel as its agent named it, with the token this control plane
    joined Ray with; None (calls go by Ray) if either is missing."""
    address = ready.get("channel") if isinstance(ready, dict) else None
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")  # set by `runtime.cluster.link.connect`
    if not isinstance(address, str) or not path:
        return None
    try:
        return NodeChannel(node_id, address, read_token(path))
    except (OSError, ValueError):
        return None
