"""Where an MCP server's listing runs: on the node of the session that asked (where its calls
run), as the server; a node that cannot answer keeps no failed listing. A real policy engine,
Executor and audit log; the fake backend plays the node (tests/docker/test_cluster_mcp.py
runs it on a real cluster)."""

from __future__ import annotations

import json

from runtime.audit import AuditLog
from runtime.errors import NodeUnavailable
from runtime.executor import Executor
from runtime.policy import SERVER_TENANT, PolicyEngine, Subject
from runtime.policy.loader import parse_policy
from runtime.sandbox.fake import FakeBackend, FakeResponse
from runtime.tools.mcp import McpCatalog

POLICY = """
version: 1
mcp_servers:
  demo: {command: [python3, -I, /opt/navi/mcp/demo_server.py], image: python}
profiles:
  all: {roles: [user], allow: [group:mcp]}
tenants:
  "*": {profiles: [all]}
"""
LISTED = FakeResponse(stdout=json.dumps({"ok": True, "tools": [
    {"name": "add", "inputSchema": {"type": "object"}}]}).encode())


def catalog(audit: AuditLog, backend: FakeBackend) -> McpCatalog:
    engine = PolicyEngine(parse_policy(POLICY, source="test.yaml"))
    executor = Executor(engine=engine, backend=backend, audit=audit,
                        resolve_image=lambda name: f"navi/{name}:latest")
    return McpCatalog(lambda: engine.policy.mcp_servers, executor)


async def test_the_listing_runs_on_the_asking_sessions_node_as_the_server(
    audit: AuditLog,
) -> None:
    backend = FakeBackend([LISTED])
    on_n2 = Subject(tenant="acme", role="user", profile="all", session="s1", node="n2")
    assert [t.name for t in await catalog(audit, backend).tools(on_n2)] == ["demo__add"]
    [request] = backend.requests
    assert (request.node, request.tenant, request.session) == ("n2", SERVER_TENANT, "none")
    assert [(r.kind, r.node, r.tool) for r in await audit.records()] == [
        ("intent", "n2", "demo__"), ("outcome", "n2", "demo__")]


async def test_a_node_that_cannot_answer_keeps_no_failed_listing(audit: AuditLog) -> None:
    backend = FakeBackend([FakeResponse(raises=NodeUnavailable("n2")), LISTED])
    mcp = catalog(audit, backend)
    on_n2 = Subject(tenant="acme", role="user", profile="all", session="s1", node="n2")
    assert await mcp.tools(on_n2) == []
    status = await mcp.status(on_n2)  # asked again at once, not held back 30 s as failed
    assert status[0]["state"] == "ready" and status[0]["tools"] == ["demo__add"], status
