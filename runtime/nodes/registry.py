"""The nodes a server knows and the one lookup every caller goes through.

Without a cluster there is one, `LocalNode` ("local"). With one, `runtime.cluster` adds a
`RemoteNode` per live node agent (`add`) and drops it when it leaves (`discard`); a
session's node id is kept in the store (`SessionRecord.node`) and in its calls' `Subject`.
`place` picks a new session's node (the cluster's `placement`; else local).
`NodeBackends` is the Executor's backend: it runs each request on `request.node`'s backend.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Protocol

from runtime.errors import NodeUnavailable
from runtime.nodes.base import SessionNode
from runtime.sandbox.backend import OutputCallback, SandboxBackend
from runtime.sandbox.models import ExecRequest, ExecResult
from runtime.store import SessionRecord
from runtime.workspace.disk import TenantBytes


class NodeTable:
    """Node id -> `SessionNode`: this machine's and, in a cluster, each live node agent's
    (`runtime.cluster` adds and drops them); an id with no node is `NodeUnavailable` (503).
    Made first and given both to `Nodes` (which reads it) and to the cluster (which keeps it)."""

    def __init__(self, local: SessionNode) -> None:
        self.local = local
        self._nodes: dict[str, SessionNode] = {local.id: local}

    def get(self, node_id: str) -> SessionNode:
        node = self._nodes.get(node_id)
        if node is None:
            raise NodeUnavailable(node_id)
        return node

    def add(self, node: SessionNode) -> None:
        self._nodes[node.id] = node

    def discard(self, node_id: str) -> SessionNode | None:
        if node_id == self.local.id:
            return None
        return self._nodes.pop(node_id, None)

    def ids(self) -> list[str]:
        return list(self._nodes)

    def all(self) -> list[SessionNode]:
        return list(self._nodes.values())


class Placement(Protocol):
    """Where sessions go in a cluster (`runtime.cluster.plane.ClusterPlane`)."""

    async def place(self) -> str:
        """The id of the node a new session is made on."""
        ...

    async def node_of(self, tenant_id: str, session_id: str) -> str:
        """The id of the node a session known by id only lives on (`NotFound` if none)."""
        ...


class Nodes:
    """The `table` of nodes and where sessions go: this machine without a `placement`."""

    def __init__(self, table: NodeTable, placement: Placement | None = None) -> None:
        self.table = table
        self.local = table.local
        self.placement = placement
        self.get = table.get
        self.add = table.add
        self.discard = table.discard
        self.ids = table.ids
        self.all = table.all
        # (node, tenant) -> what the tenant held there when last asked: counted in its disk
        # quota while that node is away (`runtime.nodes.elsewhere`)
        self.last_held: dict[tuple[str, str], TenantBytes] = {}

    async def place(self) -> SessionNode:
        """The node a new session is made on."""
        if self.placement is None:
            return self.local
        return self.get(await self.placement.place())

    def for_session(self, record: SessionRecord) -> SessionNode:
        """The node the session lives on (`record.node`)."""
        return self.get(record.node)

    async def of_session(self, tenant_id: str, session_id: str) -> SessionNode:
        """The node of a session known by id only (a shared link): this machine without a
        cluster, else the placement's answer (the store's)."""
        if self.placement is None:
            return self.local
        return self.get(await self.placement.node_of(tenant_id, session_id))

    async def state_of(self, record: SessionRecord) -> str:
        """The session's `state` as its node says it (a hop for a remote node; `idle`
        while its node is unavailable: nothing of it is mounted anywhere we can see)."""
        try:
            node = self.for_session(record)
            if node is self.local:
                return node.state(record.tenant_id, record.id)
            return await asyncio.to_thread(node.state, record.tenant_id, record.id)
        except NodeUnavailable:
            return "idle"


class NodeBackends:
    """`SandboxBackend` that runs each request on its node's backend (`request.node`)."""

    def __init__(self, nodes: Nodes) -> None:
        self.nodes = nodes
        self._running: dict[str, tuple[str, SandboxBackend]] = {}  # exec_id -> where

    async def run(
        self, request: ExecRequest, on_output: OutputCallback | None = None, *,
        before_start: Awaitable[object] | None = None,
        settled: Awaitable[object] | None = None,
    ) -> ExecResult:
        backend = self.nodes.get(request.node).backend
        self._running[request.exec_id] = (request.node, backend)
        try:
            result = await backend.run(request, on_output, before_start=before_start,
                                       settled=settled)
        except asyncio.CancelledError:  # the Executor kills it next: keep where it runs
            raise
        except BaseException:
            self._running.pop(request.exec_id, None)
            raise
        self._running.pop(request.exec_id, None)
        return result

    async def kill(self, exec_id: str) -> None:
        """On the node it runs on (this machine when not known: as before nodes)."""
        _node, backend = self._running.pop(exec_id, ("", self.nodes.local.backend))
        await backend.kill(exec_id)

    def running_on(self, node_id: str) -> int:
        """Calls in flight on a node."""
        return sum(1 for node, _b in self._running.values() if node == node_id)

    async def release_session(self, session: str) -> None:
        """On every node (whoever holds the session's node calls its backend instead)."""
        for node in self.nodes.all():
            with contextlib.suppress(NodeUnavailable):
                await node.backend.release_session(session)

    async def close(self) -> None:
        """The nodes' backends are closed by whoever made them."""
        await asyncio.sleep(0)
