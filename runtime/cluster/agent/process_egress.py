"""The egress proxy of a background process on this node (issue 42).

Why here: a process on a node runs on the node's engine, so its egress proxy must run on
the node too (a unix socket is bind-mounted into the container). Its allowlist comes by
value in the validated request (`ExecRequest.egress_allowlist` inside
`runtime.nodes.process_wire.ProcessOnNode`), never as a path; the proxy is the one a call
on this node gets: this node's egress settings (ports, idle time, connection cap), its
resolver, and its `egress_denied`, the cluster's own machines
(`runtime.cluster.agent.cluster_addresses`), refused whatever the policy allows. Its socket
sits where a call's does and is mounted as a file (nothing here outlives the agent, so no
link directory as a process on one machine keeps for its next server). Whoever opens it
closes it when the process has ended (`runtime.cluster.agent.processes`).
"""

from __future__ import annotations

from runtime.egress import EgressProxy
from runtime.sandbox.docker.backend import DockerBackend
from runtime.sandbox.models import ExecRequest


async def open_process_egress(backend: DockerBackend, request: ExecRequest
                              ) -> EgressProxy | None:
    """A started proxy for ``request`` when it asks for egress, else None."""
    if request.network != "egress":
        return None
    proxy = EgressProxy(request.egress_allowlist, backend.config.egress,
                        exec_id=request.exec_id, resolver=backend.egress_resolver,
                        denied=backend.egress_denied)
    await proxy.start(backend.config.data_dir / "egress")
    return proxy
