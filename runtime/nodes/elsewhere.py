"""A tenant's disk quota across a cluster: what it holds on every machine but the one
where its next session disk is made.

Why: a machine admits a session disk against the tenant's bytes it sees, its own disks. In a
cluster each node (and the control plane's own disks) would count only its own, so a
tenant with sessions on two nodes could hold twice its `tenant_disk_mb`. Before a session
disk is made (a new session, a fork, a fork from a snapshot: all go through
`runtime.sessions.lifecycle.open_session`, under the server's session-creation lock, so two
creates on different nodes never both pass), the control plane asks every other machine
what the tenant holds there (`SessionNode.tenant_bytes`, one hop each, in parallel) and the
admitting machine adds the sum to its own count.

A node that cannot answer (dead, or gone from the cluster) still counts, never as 0: its
last answer for the tenant (nothing changes on a node that is down), and at least each of
the tenant's sessions recorded there at a full session disk. So the quota is not exceeded
while a node is away, and the tenant's new sessions still go to the live nodes.

A node asks for the same figure (`tenant_elsewhere`) before it mounts an idle session's
disk again or makes a copy on it (`runtime.cluster.agent.asks`), so those count every
machine too.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from runtime.errors import NodeUnavailable
from runtime.nodes.base import SessionNode
from runtime.nodes.registry import Nodes
from runtime.store.ids import TenantId
from runtime.workspace.disk import NOTHING, TenantBytes

if TYPE_CHECKING:
    from runtime.policy.engine import PolicyEngine
    from runtime.store import Store
    from runtime.store.tenants import Tenants

MiB = 1024 * 1024


async def held_elsewhere(nodes: Nodes, tenant_id: str, target: SessionNode,
                         recorded: Mapping[str, int], session_bytes: int) -> TenantBytes:
    """What the tenant holds on every machine of `nodes` but `target`; `recorded`: how many
    of its sessions the store has on each node; `session_bytes`: a session disk's size."""
    def away(node_id: str) -> TenantBytes:
        at_least = recorded.get(node_id, 0) * session_bytes
        last = nodes.last_held.get((node_id, tenant_id), NOTHING)
        return TenantBytes(max(last.in_use, at_least), max(last.at_rest, at_least))

    async def ask(node: SessionNode) -> TenantBytes:
        try:
            held = await asyncio.to_thread(node.tenant_bytes, tenant_id)
        except NodeUnavailable:
            return away(node.id)
        nodes.last_held[(node.id, tenant_id)] = held
        return held

    others = [n for n in nodes.all() if n.id != target.id]
    total = NOTHING
    for held in await asyncio.gather(*(ask(n) for n in others)):
        total = total.plus(held)
    for gone in set(recorded) - set(nodes.ids()) - {target.id}:
        total = total.plus(away(gone))  # left the cluster with the tenant's disks on it
    return total


class ElsewhereDeps(Protocol):
    """What the count for a node's question needs of the server (its `Services`)."""

    @property
    def nodes(self) -> Nodes: ...

    @property
    def store(self) -> Store: ...

    @property
    def tenants(self) -> Tenants: ...

    @property
    def policy(self) -> PolicyEngine: ...


async def tenant_elsewhere(services: ElsewhereDeps, tenant_id: str, target: SessionNode
                           ) -> TenantBytes:
    """`held_elsewhere` for a node's question (`runtime.cluster.agent.asks`: a disk mounted
    again, a copy), counted as for a create: the store's sessions per node, the tenant's
    session disk size from its policy. Not under the session-creation lock: the node asks
    while a create may hold it (a fork copies on its source's node), and a create counts
    what the node holds by asking it in turn."""
    quotas = services.policy.quotas(await services.tenants.name(TenantId(tenant_id)))
    sessions = await services.store.list_sessions(tenant_id)
    return await held_elsewhere(services.nodes, tenant_id, target,
                                Counter(s.node for s in sessions), quotas.session_disk_mb * MiB)
