"""Where a session lives: the one interface to the machine that holds its files and runs its
calls.

Why: the API, the tools and the agent used to reach a session's disk (`Workspaces`) and the
sandbox backend in-process. With a cluster a session lives on one execution node; every
caller now asks `Nodes` for the session's `SessionNode` and does the same things through it,
whether the node is this process (`LocalNode`: today's code, unchanged) or a Ray node agent
(`runtime.cluster.control.remote.RemoteNode`).

    nodes = Nodes(NodeTable(LocalNode(workspaces, backend)), placement=None)  # a cluster's
    node = nodes.for_session(record)          # by record.node; NodeUnavailable if unknown
    node = nodes.get(subject.node)
    path = node.create(tenant, session, uid=..., disk_bytes=..., tenant_disk_bytes=...)
    with node.open(tenant, session) as files:  # OpenFiles: stat/list/open_read/writer/...
        ...
    await node.backend.run(request, on_output, before_start=gate)   # kill, release_session
    node.remove(tenant, session)

The disk and file side is synchronous (call it through `asyncio.to_thread`, as `Workspaces`
always was); the backend side is async.
"""

from runtime.nodes.base import LOCAL, OpenFiles, SessionNode
from runtime.nodes.local import LocalNode
from runtime.nodes.registry import NodeBackends, Nodes, NodeTable, Placement

__all__ = [
    "LOCAL", "LocalNode", "NodeBackends", "NodeTable", "Nodes", "OpenFiles", "Placement",
    "SessionNode",
]
