"""`navi serve` with NAVI_CLUSTER as the control plane of a real 2-node local cluster.

Everything is real: the cluster (a Ray head, two nodes each in a network namespace with its
own Docker engine), the server (a subprocess on loopback with the cluster's token), the
calls (hardened containers on the session's node's engine). Tests run in file order on one
cluster and one server: the node-loss test comes last but one (it kills n2's raylet and
starts it again), the restart test last.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtime.cluster import local
from tests.docker.cluster_rig import Cluster, module_cluster
from tests.docker.node_plane import plane_dir
from tests.e2e.conftest import ROOT, Server, start_server, stop_server

pytestmark = pytest.mark.docker
cluster = module_cluster()


def _policy(tmp: Path) -> Path:
    """default.yaml with code_exec on the small image the cluster's engines hold."""
    text = (ROOT / "policies" / "default.yaml").read_text()
    text = text.replace("  code_exec: python\n", "  code_exec: tools-runner\n")
    text = text.replace("execs_per_minute: 60", "execs_per_minute: 100000")
    path = tmp / "policy.yaml"
    path.write_text(text)
    return path


def _serve(tmp: Path, cluster: Cluster, token: Path | None = None,
           env: dict[str, str] | None = None) -> Server:
    keys = tmp / "data" / "keys"
    keys.mkdir(parents=True, exist_ok=True)
    if not (keys / "cluster-token").exists():
        shutil.copyfile(token or cluster.token_file, keys / "cluster-token")
        (keys / "cluster-token").chmod(0o600)
    return start_server(tmp, _policy(tmp), {"NAVI_CLUSTER": cluster.address,
                                            "NAVI_WARM_POOL_SIZE": "0", **(env or {})})


class Plane:
    def __init__(self, server: Server, tmp: Path) -> None:
        self.server = server
        self.tmp = tmp
        self.tenant, self.user = server.tenant_with_user("lab")
        self.auditor = server.token_for(self.tenant, "auditor")

    def session(self) -> dict[str, Any]:
        with self.server.client(self.user) as client:
            made = client.post("/v1/sessions", json={})
            assert made.status_code == 201, made.text
            return dict(made.json())

    def run(self, session: str, code: str, timeout: float = 60) -> httpx.Response:
        with httpx.Client(base_url=self.server.url, timeout=timeout,
                          headers={"Authorization": f"Bearer {self.user}"}) as client:
            return client.post(f"/v1/sessions/{session}/exec", json={
                "tool": "code_exec", "args": {"language": "python", "code": code}})

    def nodes(self, token: str | None = None) -> httpx.Response:
        with self.server.client(token or self.server.admin_token) as client:
            return client.get("/v1/cluster/nodes")

    def audit(self, **query: str) -> list[dict[str, Any]]:
        with self.server.client(self.auditor) as client:
            got = client.get("/v1/audit", params=query)
            assert got.status_code == 200, got.text
            return list(got.json())


@contextlib.contextmanager
def served(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory,
           policy: Callable[[Path], Path] = _policy) -> Iterator[Plane]:
    """A module's own control plane on the run's cluster (no warm pool), stopped after."""
    tmp = plane_dir(cluster, tmp_path_factory)
    made = Plane(start_server(tmp, policy(tmp), {"NAVI_CLUSTER": cluster.address,
                                                 "NAVI_WARM_POOL_SIZE": "0"}, ready_s=180), tmp)
    try:
        yield made
    finally:
        stop_server(made.server)


@pytest.fixture(scope="module")
def plane(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    tmp = tmp_path_factory.mktemp("plane")
    made = Plane(_serve(tmp, cluster), tmp)
    yield made
    stop_server(made.server)  # the last one (a test restarts it)


@pytest.fixture(scope="module")
def made(plane: Plane) -> list[dict[str, Any]]:
    """Four sessions, made one after another."""
    return [plane.session() for _ in range(4)]


def test_sessions_spread_over_both_nodes_and_keep_their_node(
    plane: Plane, made: list[dict[str, Any]]
) -> None:
    assert [s["node"] for s in made] == ["n1", "n2", "n1", "n2"]
    with plane.server.client(plane.user) as client:
        listed = {s["id"]: s["node"] for s in client.get("/v1/sessions").json()}
        one = client.get(f"/v1/sessions/{made[1]['id']}").json()
    assert listed == {s["id"]: s["node"] for s in made} and one["node"] == "n2"


def test_each_call_runs_on_its_sessions_node_and_says_so(
    plane: Plane, made: list[dict[str, Any]]
) -> None:
    for session in made[:2]:
        out = plane.run(session["id"], "import os; print(os.uname().nodename != '')")
        assert out.status_code == 200, out.text
        body = out.json()
        assert body["ok"] and body["node"] == session["node"], body
        records = plane.audit(exec_id=body["exec_id"])
        assert [(r["kind"], r["node"]) for r in records] == [
            ("intent", session["node"]), ("outcome", session["node"])]


def test_files_cross_the_hop_both_ways(plane: Plane, made: list[dict[str, Any]]) -> None:
    session = made[1]["id"]  # on n2
    with plane.server.client(plane.user) as client:
        put = client.put(f"/v1/sessions/{session}/files/data/in.txt", content=b"3\n4\n")
        assert put.status_code == 201, put.text
    out = plane.run(session, "n=[int(x) for x in open('data/in.txt')]\n"
                             "open('sum.txt','w').write(str(sum(n)))\nprint(sum(n))")
    assert out.status_code == 200 and out.json()["stdout"] == "7\n", out.text
    with plane.server.client(plane.user) as client:
        assert client.get(f"/v1/sessions/{session}/files/sum.txt").content == b"7"
        paths = {e["path"] for e in client.get(f"/v1/sessions/{session}/files").json()}
    assert {"data/in.txt", "sum.txt"} <= paths


TOOL = ('name = "where"\ndescription = "d"\nparameters = {"type": "object"}\n'
        "async def execute(params):\n    return open('data/in.txt').read().split()[0]\n")


def test_a_user_tool_runs_on_the_sessions_node(
    plane: Plane, made: list[dict[str, Any]]
) -> None:
    """The tool's code reaches n2 by its hash (the node keeps it in its own tool-object
    directory) and runs there next to the session's files."""
    session = made[1]["id"]  # on n2, where data/in.txt is
    with httpx.Client(base_url=plane.server.url, timeout=120,
                      headers={"Authorization": f"Bearer {plane.user}"}) as client:
        wrote = client.post(f"/v1/sessions/{session}/exec", json={
            "tool": "write_tool", "args": {"name": "where", "code": TOOL}})
        assert wrote.status_code == 200 and wrote.json()["ok"], wrote.text
        ran = client.post(f"/v1/sessions/{session}/exec", json={
            "tool": "test_tool", "args": {"name": "where"}})
    assert ran.status_code == 200, ran.text
    body = ran.json()
    assert body["ok"] and body["output"] == "3" and body["node"] == "n2", body


def test_a_sessions_state_comes_from_its_node(
    plane: Plane, made: list[dict[str, Any]]
) -> None:
    """Used a moment ago on n2: `active` there (its disk is mounted on n2), whatever the
    control plane's own disks say."""
    session = made[1]["id"]
    with plane.server.client(plane.user) as client:
        one = client.get(f"/v1/sessions/{session}").json()
        listed = {s["id"]: s["state"] for s in client.get("/v1/sessions").json()}
    assert one["state"] == "active" and listed[session] == "active", one


def test_the_operator_lists_the_nodes_and_no_one_else(
    plane: Plane, made: list[dict[str, Any]]
) -> None:
    got = plane.nodes()
    assert got.status_code == 200, got.text
    rows = {n["id"]: n for n in got.json()}
    assert set(rows) == {"n1", "n2"}
    assert all(n["state"] == "alive" and n["sessions"] == 2 and n["running"] == 0
               for n in rows.values()), rows
    assert rows["n1"]["address"] != rows["n2"]["address"]
    for token in (plane.user, plane.auditor):
        assert plane.nodes(token).status_code == 403


def _wait(check: Any, timeout: float = 60, every: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(every)


def open_calls(plane: Plane, session: str) -> set[str]:
    """Exec ids of the session's calls with an intent and nothing closing it yet."""
    records = [r for r in plane.audit(session=session) if r.get("exec_id")]
    return {r["exec_id"] for r in records if r["kind"] == "intent"} - {
        r["exec_id"] for r in records if r["kind"] != "intent"}


def node_states(plane: Plane) -> dict[str, str]:
    return {n["id"]: n["state"] for n in plane.nodes().json()}


def test_a_dead_node_is_contained_and_its_sessions_come_back_with_it(
    plane: Plane, cluster: Cluster, made: list[dict[str, Any]]
) -> None:
    on_n1, on_n2 = made[0]["id"], made[1]["id"]
    with plane.server.client(plane.user) as client:
        assert client.put(f"/v1/sessions/{on_n2}/files/kept.txt",
                          content=b"kept").status_code == 201
    slow: dict[str, httpx.Response] = {}
    call = threading.Thread(target=lambda: slow.update(
        r=plane.run(on_n2, "import time; print('up', flush=True); time.sleep(60)", 120)))
    call.start()
    assert _wait(lambda: open_calls(plane, on_n2), 30)
    time.sleep(2)  # the job is running in its container on n2
    running = {n["id"]: n["running"] for n in plane.nodes().json()}
    assert running == {"n1": 0, "n2": 1}, running
    os.kill(cluster.pids("n2")["raylet"], signal.SIGKILL)
    call.join(120)
    assert slow["r"].status_code == 503, slow["r"].text
    error = slow["r"].json()["error"]
    assert error["code"] == "node_unavailable" and "n2" in error["message"]
    last = [r for r in plane.audit(session=on_n2) if r.get("exec_id")][-1]
    assert (last["kind"], last["node"]) == ("interrupted", "n2"), last

    again = plane.run(on_n2, "print(1)")  # its sessions: 503, the node named
    assert again.status_code == 503 and "n2" in again.json()["error"]["message"]
    with plane.server.client(plane.user) as client:
        files = client.get(f"/v1/sessions/{on_n2}/files")
    assert files.status_code == 503 and files.json()["error"]["code"] == "node_unavailable"
    ok = plane.run(on_n1, "print(1)")  # the other node's: unaffected
    assert ok.status_code == 200 and ok.json()["node"] == "n1", ok.text
    assert [plane.session()["node"] for _ in range(2)] == ["n1", "n1"]
    assert _wait(lambda: node_states(plane) == {"n1": "alive", "n2": "dead"}, 30), \
        node_states(plane)

    local.start_again(cluster.dir, "n2")
    back = _wait(lambda: plane.run(on_n2, "print(open('kept.txt').read())").status_code == 200,
                 90, 2)
    assert back, "n2's session did not work again once n2 was back"
    out = plane.run(on_n2, "print(open('kept.txt').read())").json()
    assert out["stdout"] == "kept\n" and out["node"] == "n2", out
    with plane.server.client(plane.user) as client:
        assert client.get(f"/v1/sessions/{on_n2}/files/kept.txt").content == b"kept"


def test_a_restarted_control_plane_finds_the_nodes_and_their_sessions(
    plane: Plane, cluster: Cluster, made: list[dict[str, Any]]
) -> None:
    for session in made[:2]:
        with plane.server.client(plane.user) as client:
            assert client.put(f"/v1/sessions/{session['id']}/files/before.txt",
                              content=session["node"].encode()).status_code == 201
    stop_server(plane.server)
    plane.server = _serve(plane.tmp, cluster)  # the module fixture stops it
    with plane.server.client(plane.user) as client:
        listed = {s["id"]: s["node"] for s in client.get("/v1/sessions").json()}
    assert {s["id"]: s["node"] for s in made}.items() <= listed.items()
    assert node_states(plane) == {"n1": "alive", "n2": "alive"}
    for session in made[:2]:
        out = plane.run(session["id"], "print(open('before.txt').read())")
        assert out.status_code == 200, out.text
        assert (out.json()["stdout"], out.json()["node"]) == (
            session["node"] + "\n", session["node"]), out.text


def test_a_control_plane_with_a_wrong_token_is_refused_at_start(
    cluster: Cluster, tmp_path: Path
) -> None:
    wrong = tmp_path / "wrong-token"
    wrong.write_text("0" * 64)
    try:  # Ray's join tries the GCS once a second, 20 times unless told: 3 are enough here
        server = _serve(tmp_path, cluster, token=wrong,
                        env={"RAY_gcs_server_port_wait_time_s": "3"})
    except RuntimeError as exc:  # it exited: how
        assert "could not join the Ray cluster" in str(exc) and "InvalidAuthToken" in str(exc)
    else:
        stop_server(server)
        pytest.fail("a control plane with a wrong token started")


def _doctor_cluster(cluster: Cluster, data: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "runtime.cli", "doctor", "--data-dir", str(data), "--json"],
        capture_output=True, text=True, cwd=ROOT, timeout=180,
        env={**os.environ, "NAVI_CLUSTER": cluster.address})
    checks = json.loads(done.stdout[done.stdout.index("["):])
    return dict(next(c for c in checks if c["name"] == "cluster"))


def test_doctor_reports_the_cluster_and_refuses_a_token_others_can_read(
    cluster: Cluster, tmp_path: Path
) -> None:
    keys = tmp_path / "data" / "keys"
    keys.mkdir(parents=True)
    shutil.copyfile(cluster.token_file, keys / "cluster-token")
    (keys / "cluster-token").chmod(0o644)
    refused = _doctor_cluster(cluster, tmp_path / "data")
    assert not refused["ok"] and "chmod 600" in refused["detail"], refused
    (keys / "cluster-token").chmod(0o600)
    seen = _doctor_cluster(cluster, tmp_path / "data")
    assert seen["ok"] and cluster.address in seen["detail"], seen
    assert "n1 alive" in seen["detail"] and "n2 alive" in seen["detail"], seen
