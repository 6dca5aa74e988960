"""`navi serve` as a cluster's control plane: which nodes are up, where sessions go.

It follows the cluster (`refresh`, every `REFRESH_S` and before each placement): a node that
Ray shows alive gets its node agent (made, or found again after a restart of this process)
and is registered in `Nodes`, so its sessions' calls and files reach it; a node Ray shows
dead, or whose agent failed a call (`lost`), is dropped from `Nodes` (its sessions answer
503 `node_unavailable`) until Ray shows it alive again with a new agent. New sessions go to
the live node with the fewest sessions (`runtime.cluster.placement`); the store keeps each
session's node, so nothing else needs to survive a restart. While a node is registered, its
questions on a tenant's bytes elsewhere are answered with `count_elsewhere`
(`runtime.cluster.control.asks`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from runtime.cluster import link
from runtime.cluster.link import RayNode
from runtime.cluster.placement import Candidate, natural_key, place
from runtime.errors import NodeUnavailable, NotFound
from runtime.logging import get_logger
from runtime.nodes import NodeTable, SessionNode
from runtime.store import SessionRecord
from runtime.workspace.disk import TenantBytes

log = get_logger(__name__)

REFRESH_S = 2.0


class SessionCounts(Protocol):
    """What the plane reads of the store: sessions per node, and a session's node."""

    async def sessions_per_node(self) -> dict[str, int]: ...

    async def get_session(self, tenant_id: str, session_id: str) -> SessionRecord | None: ...


AgentFor = Callable[[RayNode], SessionNode]
"""Gets or makes the node agent on a live Ray node (blocking: it talks to Ray)."""
CountElsewhere = Callable[[str, SessionNode], Awaitable[TenantBytes]]
"""What a tenant holds on every machine but the given node (`nodes.elsewhere`)."""


@dataclass(frozen=True)
class NodeView:
    """`GET /v1/cluster/nodes`'s row."""

    id: str
    address: str
    state: Literal["alive", "dead"]
    sessions: int
    running: int


class ClusterPlane:
    """The `Placement` of the server's `Nodes`; keeps their `NodeTable` (made first, given
    to both)."""

    def __init__(self, address: str, token: Path, nodes: NodeTable, store: SessionCounts,
                 agent_for: AgentFor) -> None:
        self.address = address
        self.token = token
        self.nodes = nodes
        self.store = store
        self.agent_for = agent_for
        self.known: dict[str, RayNode] = {}  # every execution node seen, dead or alive
        self._serving: dict[str, str] = {}  # node id -> the Ray node id its agent runs on
        self._lost: dict[str, str] = {}  # node id -> Ray node id whose agent failed a call
        self._refreshed = 0.0
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.count_elsewhere: CountElsewhere | None = None  # set before `start`
        self._answering: dict[str, asyncio.Task[None]] = {}  # node id -> its asks answered

    async def start(self) -> None:
        """Join the cluster (a `ClusterError` when it refuses or is not there) and take up
        its live nodes; then follow it in the background."""
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(link.connect, self.address, self.token)
        await self.refresh(force=True)
        log.info("cluster_joined", address=self.address,
                 nodes={n.id: n.alive for n in self.known.values()})
        self._task = asyncio.create_task(self._follow())

    async def close(self) -> None:
        for node_id in list(self._answering):
            self._stop_answering(node_id)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await asyncio.to_thread(link.disconnect)

    async def _follow(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_S)
            try:
                await self.refresh()
            except Exception as exc:  # Ray busy or the head away: try again next round
                log.warning("cluster_refresh_failed", error=str(exc))

    def lost(self, node_id: str) -> None:
        """A call or file operation found the node's agent gone: no more work goes there
        until Ray shows the node alive with a new agent. Any thread may call it."""
        loop = self._loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is not None and running is not loop:
            loop.call_soon_threadsafe(self._drop, node_id)
        else:
            self._drop(node_id)

    def _drop(self, node_id: str) -> None:
        ray_id = self._serving.pop(node_id, None)
        if ray_id is not None:
            self._lost[node_id] = ray_id
            self.nodes.discard(node_id)
            self._stop_answering(node_id)
            log.warning("cluster_node_lost", node=node_id)

    async def refresh(self, *, force: bool = False) -> None:
        async with self._lock:
            if not force and time.monotonic() - self._refreshed < REFRESH_S / 2:
                return
            found = await asyncio.to_thread(link.nodes)
            for node in found:
                self.known[node.id] = node
                await self._take_up(node)
            self._refreshed = time.monotonic()

    async def _take_up(self, node: RayNode) -> None:
        if not node.alive or self._lost.get(node.id) == node.ray_id:
            if self._serving.pop(node.id, None) is not None:
                self.nodes.discard(node.id)
                self._stop_answering(node.id)
                log.warning("cluster_node_dead", node=node.id)
            return
        if self._serving.get(node.id) == node.ray_id:
            return
        try:
            agent = await asyncio.to_thread(self.agent_for, node)
        except Exception as exc:  # not ready yet (a node just started): next round
            log.warning("cluster_agent_unavailable", node=node.id, error=str(exc))
            return
        self.nodes.add(agent)
        self._serving[node.id] = node.ray_id
        self._answer(node.id, agent)
        self._lost.pop(node.id, None)
        log.info("cluster_node_up", node=node.id, address=node.address)

    def _answer(self, node_id: str, agent: SessionNode) -> None:
        """The node's questions answered while it is registered (an agent found again
        replaces the old stream)."""
        self._stop_answering(node_id)
        answer = getattr(agent, "answer_asks", None)
        if answer is not None and self.count_elsewhere is not None:
            self._answering[node_id] = asyncio.create_task(answer(self.count_elsewhere))

    def _stop_answering(self, node_id: str) -> None:
        task = self._answering.pop(node_id, None)
        if task is not None:
            task.cancel()

    def alive(self, node_id: str) -> bool:
        return node_id in self._serving

    async def place(self) -> str:
        """The node for a new session (call it under the server's session-creation lock,
        so the counts include every session placed before)."""
        await self.refresh()
        counts = await self.store.sessions_per_node()
        chosen = place(Candidate(id=n, alive=self.alive(n), sessions=counts.get(n, 0))
                       for n in self.known)
        if chosen is None:
            raise NodeUnavailable("no live node", message="no cluster node is alive to take "
                                  "a new session")
        return chosen

    async def node_of(self, tenant_id: str, session_id: str) -> str:
        """The node a session lives on, as the store keeps it (`NotFound` if no session)."""
        record = await self.store.get_session(tenant_id, session_id)
        if record is None:
            raise NotFound("no such session")
        return record.node

    async def describe(self, running_on: Callable[[str], int] = lambda _n: 0
                       ) -> list[NodeView]:
        """Every node seen, dead or alive; `running_on`: calls in flight per node."""
        await self.refresh()
        counts = await self.store.sessions_per_node()
        return [NodeView(id=n.id, address=n.address,
                         state="alive" if self.alive(n.id) else "dead",
                         sessions=counts.get(n.id, 0), running=running_on(n.id))
                for n in sorted(self.known.values(), key=lambda n: natural_key(n.id))]
