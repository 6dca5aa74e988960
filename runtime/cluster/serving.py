"""`NAVI_CLUSTER` in `navi serve`: the control plane the server's `Nodes` place sessions with.

Unset, nothing here runs and nothing is imported from Ray: one machine, as before. Set,
`cluster_plane` makes the plane before the server's `Nodes` (it keeps their `NodeTable` and
is their `Placement`: new sessions placed on the live nodes, a session's node found in the
store); `join_cluster` joins with `<data_dir>/keys/cluster-token` (refused at start without
it) and registers a `RemoteNode` per live node agent.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Protocol

from runtime.cluster import link
from runtime.cluster.link import RayNode
from runtime.cluster.plane import ClusterPlane, SessionCounts
from runtime.nodes import NodeTable, SessionNode
from runtime.nodes.elsewhere import ElsewhereDeps, tenant_elsewhere

if TYPE_CHECKING:
    from runtime.config import Settings
    

class JoinDeps(ElsewhereDeps, Protocol):
    """What joining needs of the server (the API's `Services` is one; this package never
    imports `runtime.api`): where the plane goes once joined, and what a node's question on
    a tenant's bytes elsewhere is counted with (`runtime.nodes.elsewhere`)."""

    cluster: ClusterPlane | None


def cluster_plane(settings: Settings, table: NodeTable, store: SessionCounts
                  ) -> ClusterPlane | None:
    """The plane for `NAVI_CLUSTER` (not joined yet; None when unset)."""
    if settings.cluster is None:
        return None

    def agent(node: RayNode) -> SessionNode:
        # imported once joined: Ray reads its token settings when it is first imported
        from runtime.cluster.control.remote import agent_for

        return agent_for(node.id, node.ray_id, on_lost=plane.lost)

    plane = ClusterPlane(settings.cluster, link.token_file(settings.data_dir), table, store,
                         agent_for=agent)
    return plane


async def join_cluster(services: JoinDeps, plane: ClusterPlane | None) -> None:
    """Join (a `ClusterError` when the cluster refuses or is not there) and follow it."""
    if plane is None:
        return
    plane.count_elsewhere = partial(tenant_elsewhere, services)
    await plane.start()
    services.cluster = plane
