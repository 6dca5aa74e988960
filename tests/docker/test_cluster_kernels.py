"""Python kernels of sessions on a cluster node, for real.

One 2-node local cluster (with the python image in its engines) and one `navi serve` control
plane (NAVI_CLUSTER) for the module. The kernel's container runs on the NODE's engine, with
the session's disk there (`runtime.cluster.agent.kernels`); the control plane decides, audits
and keeps the token watch (`runtime.kernels.on_nodes`). Few sessions: every kernel start
costs an IPython start on a busy machine.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import docker
import httpx
import pytest

from tests.docker.cluster_rig import Cluster, module_cluster
from tests.docker.node_plane import plane_dir, user_client
from tests.docker.test_cluster_serve import Plane
from tests.e2e.conftest import ROOT, start_server, stop_server

pytestmark = pytest.mark.docker
PYTHON = "navi/python:latest"  # code_exec's image: a kernel runs under code_exec's rule
cluster = module_cluster(image=PYTHON)
IDLE_S = 6  # NAVI_KERNEL_IDLE_S of the control plane: its sweep asks the nodes to save


@pytest.fixture(scope="module")
def plane(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    tmp = plane_dir(cluster, tmp_path_factory)
    policy = tmp / "policy.yaml"
    policy.write_text((ROOT / "policies" / "default.yaml").read_text().replace(
        "execs_per_minute: 60", "execs_per_minute: 100000"))
    server = start_server(tmp, policy, {"NAVI_CLUSTER": cluster.address,
                                        "NAVI_WARM_POOL_SIZE": "0",
                                        "NAVI_KERNEL_IDLE_S": str(IDLE_S)}, ready_s=180)
    made = Plane(server, tmp)
    yield made
    stop_server(made.server)


def client(plane: Plane) -> httpx.Client:
    return user_client(plane.server.url, plane.user, 180)


def execute(plane: Plane, session: str, code: str) -> dict[str, Any]:
    with client(plane) as c:
        done = c.post(f"/v1/sessions/{session}/kernels/default/execute", json={"code": code})
        assert done.status_code == 200, done.text
        return dict(done.json())


def listed(plane: Plane, session: str) -> list[dict[str, Any]]:
    with client(plane) as c:
        got = c.get(f"/v1/sessions/{session}/kernels")
        assert got.status_code == 200, got.text
        return list(got.json())


def containers(cluster: Cluster, node: str, session: str) -> list[dict[str, Any]]:
    """The session's containers on that node's own engine."""
    socket = next(n["socket"] for n in cluster.state["nodes"] if n["id"] == node)
    api = docker.APIClient(base_url=f"unix://{socket}")
    try:
        return list(api.containers(all=True, filters={"label": f"navi.session={session}"}))
    finally:
        api.close()


def until(check: Any, within_s: float, what: str) -> Any:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.3)
    raise AssertionError(f"not {what} within {within_s} s")


def node_session(plane: Plane) -> dict[str, Any]:
    made = plane.session()
    assert made["node"] in ("n1", "n2"), made  # on a node, never the control plane
    return made


def test_names_persist_between_executes_of_a_node_sessions_kernel(
        cluster: Cluster, plane: Plane, docker_api: docker.APIClient) -> None:
    made = node_session(plane)
    s, node = made["id"], made["node"]
    first = execute(plane, s, "x = 41")
    assert first["ok"] and first["node"] == node, first
    second = execute(plane, s, "x + 1")
    assert second["results"] == [{"text/plain": "42"}] and second["node"] == node, second
    assert len(containers(cluster, node, s)) == 1  # the node's engine runs the kernel
    assert docker_api.containers(all=True, filters={"label": f"navi.session={s}"}) == []
    shown = execute(plane, s, "import pandas as pd\npd.DataFrame({'a': [1]})")
    assert "<table" in shown["results"][0]["text/html"], shown  # a table, as locally
    failed = execute(plane, s, "1 / 0")
    assert not failed["ok"] and failed["error"]["name"] == "ZeroDivisionError", failed
    kinds = [e["kind"] for e in plane.audit(session=s) if e["tool"] == "kernel_exec"]
    assert kinds.count("intent") == 4 and kinds.count("outcome") == 4, kinds  # as locally
    assert [k["state"] for k in listed(plane, s)] == ["running"]


def test_an_idle_node_kernel_is_saved_on_the_node_and_restored(
        cluster: Cluster, plane: Plane) -> None:
    made = node_session(plane)
    s, node = made["id"], made["node"]
    made_x = execute(plane, s, "x = 41\nimport socket\nsock = socket.socket()")
    assert made_x["ok"], made_x
    until(lambda: [k for k in listed(plane, s) if k["state"] == "saved"], 60, "saved")
    until(lambda: containers(cluster, node, s) == [], 30, "stopped")  # 0 containers
    back = execute(plane, s, "x + 1")
    assert back["results"] == [{"text/plain": "42"}], back
    assert "x" in back["restored"] and back["lost"] == ["sock"], back


def test_delete_and_session_end_stop_the_node_kernel(cluster: Cluster, plane: Plane) -> None:
    made = node_session(plane)
    s, node = made["id"], made["node"]
    made_y = execute(plane, s, "y = 1")
    assert made_y["ok"], made_y
    assert len(containers(cluster, node, s)) == 1
    with client(plane) as c:
        assert c.delete(f"/v1/sessions/{s}/kernels/default").status_code == 204
        assert containers(cluster, node, s) == []  # stopped on the node
        assert listed(plane, s) == []  # and its saved state is gone
        assert c.delete(f"/v1/sessions/{s}/kernels/default").status_code == 404
        again = execute(plane, s, "'y' in dir()")
        assert again["results"] == [{"text/plain": "False"}], again
        assert len(containers(cluster, node, s)) == 1
        assert c.delete(f"/v1/sessions/{s}").status_code == 204
    until(lambda: containers(cluster, node, s) == [], 20, "stopped with its session")


def test_a_node_kernel_reaches_its_sessions_port_through_the_nodes_relay(
        cluster: Cluster, plane: Plane) -> None:
    s = node_session(plane)["id"]
    reach = ("import urllib.request as u\n"
             "u.urlopen('http://127.0.0.1:8000/index.txt', timeout=10).read().decode()")
    with client(plane) as c:
        assert c.put(f"/v1/sessions/{s}/files/site/index.txt", content=b"on the node\n"
                     ).status_code == 201
        made = c.post(f"/v1/sessions/{s}/processes", json={
            "command": "python3 -m http.server 8000 --bind 127.0.0.1", "cwd": "site",
            "ports": [8000]})
        assert made.status_code == 201, made.text
        until(lambda: c.get(f"/v1/sessions/{s}/ports/8000/index.txt").status_code == 200,
              60, "served")
        got = execute(plane, s, reach)  # the kernel starts after the port: bound at start
        assert got["results"] == [{"text/plain": "'on the node\\n'"}], got
        assert c.delete(f"/v1/sessions/{s}").status_code == 204


def test_a_node_kernel_ends_with_the_token_that_used_it(cluster: Cluster, plane: Plane) -> None:
    server = plane.server
    with server.client(server.admin_token) as admin:
        made = admin.post(f"/v1/tenants/{plane.tenant}/tokens", json={"role": "user"}).json()
    with server.client(made["token"]) as c:
        session = c.post("/v1/sessions", json={})
        assert session.status_code == 201, session.text
        s, node = session.json()["id"], session.json()["node"]
        ran = c.post(f"/v1/sessions/{s}/kernels/default/execute", json={"code": "kept = 1"},
                     timeout=180)
        assert ran.status_code == 200 and ran.json()["ok"], ran.text
    assert len(containers(cluster, node, s)) == 1
    busy = threading.Thread(target=lambda: httpx.post(  # busy: the idle sweep cannot save it
        f"{server.url}/v1/sessions/{s}/kernels/default/execute", timeout=60,
        json={"code": "import time\ntime.sleep(40)"},
        headers={"Authorization": f"Bearer {made['token']}"}), daemon=True)
    busy.start()
    time.sleep(2)
    with server.client(server.admin_token) as admin:
        gone = admin.delete(f"/v1/tenants/{plane.tenant}/tokens/{made['id']}")
        assert gone.status_code == 204, gone.text
    until(lambda: containers(cluster, node, s) == [], 25, "ended on the node with its token")
    assert listed(plane, s) == []  # its names were not saved
    busy.join(30)
