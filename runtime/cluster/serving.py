"""`NAVI_CLUSTER` in `navi serve`: join the cluster and hook it into the server's `Nodes`.

Unset, nothing here runs and nothing is imported from Ray: one machine, as before. Set, the
server joins with `<data_dir>/keys/cluster-token` (refused at start without it), registers
a `RemoteNode` per live node agent, places new sessions on them (`Nodes.placer`) and finds
a session's node in the store (`Nodes.lookup`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from runtime.cluster import link
from runtime.cluster.link import RayNode
from runtime.cluster.plane import ClusterPlane
from runtime.errors import NotFound
from runtime.nodes import SessionNode

if TYPE_CHECKING:
    from runtime.config import Settings
    from runtime.executor import Executor
    from runtime.nodes import Nodes
    from runtime.store import Store


class JoinDeps(Protocol):
    """What joining needs of the server (the API's `Services` is one; this package never
    imports `runtime.api`): its settings, store, nodes and executor, and where the plane
    goes."""

    settings: Settings
    store: Store
    nodes: Nodes
    executor: Executor
    cluster: ClusterPlane | None  # set here, once joined


async def join_cluster(services: JoinDeps) -> ClusterPlane | None:
    settings = services.settings
    if settings.cluster is None:
        return None
    store, nodes = services.store, services.nodes

    def agent(node: RayNode) -> SessionNode:
        # imported once joined: Ray reads its token settings when it is first imported
        from runtime.nodes.control.remote import agent_for

        return agent_for(node.id, node.ray_id, on_lost=plane.lost)

    async def lookup(tenant_id: str, session_id: str) -> str:
        record = await store.get_session(tenant_id, session_id)
        if record is None:
            raise NotFound("no such session")
        return record.node

    backends = services.executor.backend
    running_on = getattr(backends, "running_on", None)
    plane = ClusterPlane(settings.cluster, link.token_file(settings.data_dir), nodes, store,
                         agent_for=agent,
                         running_on=running_on if callable(running_on) else lambda _n: 0)
    await plane.start()
    nodes.placer = plane.placer
    nodes.lookup = lookup
    services.cluster = plane
    return plane
