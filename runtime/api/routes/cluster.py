"""`GET /v1/cluster/nodes`: the operator's view of the execution nodes (NAVI_CLUSTER).

Operator `admin` only (a node list says where every tenant's sessions live); 404 on a
server without a cluster.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from runtime.api.deps import Admin, get_services
from runtime.errors import NotFound
from runtime.nodes import NodeBackends
from runtime.wire import ClusterNodeOut

router = APIRouter(prefix="/v1/cluster", tags=["cluster"])


@router.get("/nodes", response_model=list[ClusterNodeOut])
async def list_nodes(request: Request, principal: Admin) -> list[ClusterNodeOut]:
    services = get_services(request)
    plane = services.cluster
    if plane is None:
        raise NotFound("this server runs no cluster (NAVI_CLUSTER is unset)")
    backends = services.executor.backend  # calls in flight per node
    running_on = backends.running_on if isinstance(backends, NodeBackends) else None
    return [ClusterNodeOut(id=n.id, address=n.address, state=n.state,
                           sessions=n.sessions, running=n.running)
            for n in await plane.describe(running_on or (lambda _n: 0))]
