"""MCP servers a policy declares, for a session that lives on a cluster node, for real.

One 2-node local cluster (with the python image, which holds the shipped demo MCP server, in
its engines) and one `navi serve` control plane (NAVI_CLUSTER). A call of `demo__*` from a
node session is decided and audited by the control plane and runs the server in a fresh
container on the session's NODE's engine, with the session's files there as its working
directory; the control plane's engine runs nothing of it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import docker
import httpx
import pytest

from runtime.policy import SERVER_TENANT
from tests.docker.cluster_rig import Cluster, module_cluster
from tests.docker.node_plane import plane_dir, user_client
from tests.docker.test_cluster_serve import Plane
from tests.e2e.conftest import start_server, stop_server

pytestmark = pytest.mark.docker
PYTHON = "navi/python:latest"  # the demo server's image
cluster = module_cluster(image=PYTHON)

POLICY = """version: 1
defaults:
  limits: {timeout_s: 60, max_timeout_s: 120}
  quotas: {max_concurrent: 4, execs_per_minute: 100000}
images: {code_exec: tools-runner}
mcp_servers:
  demo: {command: [python3, -I, /opt/navi/mcp/demo_server.py], image: python}
profiles:
  developer:
    allow: [group:exec, group:fs, group:meta, group:mcp]
tenants:
  "*": {profiles: [developer], default_profile: developer}
"""


@pytest.fixture(scope="module")
def plane(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    tmp = plane_dir(cluster, tmp_path_factory)
    (tmp / "policy.yaml").write_text(POLICY)
    server = start_server(tmp, tmp / "policy.yaml", {"NAVI_CLUSTER": cluster.address,
                                                     "NAVI_WARM_POOL_SIZE": "0"}, ready_s=180)
    made = Plane(server, tmp)
    yield made
    stop_server(made.server)


@pytest.fixture(scope="module")
def on_node(plane: Plane) -> dict[str, Any]:
    """A session placed on a node, with a file in its workspace there."""
    made = plane.session()
    assert made["node"] in ("n1", "n2"), made
    with client(plane) as c:
        put = c.put(f"/v1/sessions/{made['id']}/files/notes.txt", content=b"one two three\n")
        assert put.status_code == 201, put.text
    return made


def client(plane: Plane) -> httpx.Client:
    return user_client(plane.server.url, plane.user, 180)


def engine_of(cluster: Cluster, node: str) -> docker.APIClient:
    found = next(n for n in cluster.state["nodes"] if n["id"] == node)
    return docker.APIClient(base_url=f"unix://{found['socket']}")


def ended(api: docker.APIClient, tenant: str, since: float) -> list[dict[str, Any]]:
    """The tenant's containers the engine removed since `since`, from its event log (a call's
    container is removed when the call ends; one from a warm pool was made before the call,
    under another exec id, so the tenant is what names it)."""
    events = api.events(since=int(since), until=int(time.time()) + 1, decode=True,
                        filters={"type": "container", "event": "destroy",
                                 "label": f"navi.tenant={tenant}"})
    return list(events)


def call(plane: Plane, session: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    with client(plane) as c:
        done = c.post(f"/v1/sessions/{session}/exec", json={"tool": tool, "args": args})
    assert done.status_code == 200, done.text
    return dict(done.json())


def listings(plane: Plane) -> list[dict[str, Any]]:
    """The audit records of the server's listings (tool `demo__`, as the server itself)."""
    with plane.server.client(plane.server.admin_token) as admin:
        got = admin.get("/v1/audit", params={"tenant": SERVER_TENANT, "tool": "demo__"})
    assert got.status_code == 200, got.text
    return list(got.json())


def test_a_node_sessions_tools_list_the_demo_servers_tools_asked_on_its_node(
    plane: Plane, cluster: Cluster, on_node: dict[str, Any], docker_api: docker.APIClient,
) -> None:
    """The listing runs the server too: on the asking session's node, where its calls run
    (the control plane runs no server code, and need not hold its image)."""
    node, since = on_node["node"], time.time() - 1
    with client(plane) as c:
        got = c.get("/v1/tools", params={"session": on_node["id"]})
    assert got.status_code == 200, got.text
    tools = {t["name"]: t for t in got.json()}
    assert {"demo__add", "demo__count_words", "demo__workspace_files"} <= set(tools), tools
    assert tools["demo__add"]["group"] == "group:mcp"
    assert [(r["kind"], r["node"]) for r in listings(plane)] == [
        ("intent", node), ("outcome", node)]
    assert len(ended(engine_of(cluster, node), SERVER_TENANT, since)) == 1
    assert ended(docker_api, SERVER_TENANT, since) == []


def test_an_mcp_call_of_a_node_session_runs_on_its_node_with_its_files(
    plane: Plane, cluster: Cluster, on_node: dict[str, Any], docker_api: docker.APIClient,
) -> None:
    session, node = on_node["id"], on_node["node"]
    engine = engine_of(cluster, node)
    since = time.time() - 1
    added = call(plane, session, "demo__add", {"a": 2, "b": 3.5})
    assert added["ok"] and added["output"] == "5.5" and added["node"] == node, added
    counted = call(plane, session, "demo__count_words", {"path": "notes.txt"})
    assert counted["ok"] and counted["output"] == "3 words in notes.txt", counted
    listed = call(plane, session, "demo__workspace_files", {})
    assert listed["ok"] and "notes.txt" in listed["output"], listed
    for body in (added, counted, listed):
        assert body["node"] == node and body["metadata"]["mcp_server"] == "demo", body
        records = plane.audit(exec_id=body["exec_id"])
        assert [(r["kind"], r["node"]) for r in records] == [
            ("intent", node), ("outcome", node)], records
        assert records[0]["image"].startswith("navi/python"), records[0]
    # their containers: on the session's node's engine, one per call; none on the control
    # plane's engine nor on the other node's
    other = engine_of(cluster, "n2" if node == "n1" else "n1")
    assert len(ended(engine, plane.tenant, since)) == 3
    assert ended(docker_api, plane.tenant, since) == ended(other, plane.tenant, since) == []
