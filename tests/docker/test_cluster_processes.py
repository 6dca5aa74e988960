"""Background processes of sessions on a cluster node, for real.

One 2-node local cluster and one `navi serve` control plane (NAVI_CLUSTER) for the module:
each session lives on a node, whose disk the control plane does not see. A process's
container runs on its node's engine (none on the control plane's), with the session's
/workspace from the node's disk; its output comes back over the hop into the control plane's
log, so output, wait, the session's events, input, signals, audit, the lifetime cap, the
counts and the session's end work as on one machine (`runtime.processes.on_node`); a declared
port is served by the node's relay and reached through the API and a preview link over the
hop, and the session's later calls on the node reach it at 127.0.0.1. A process granted
egress goes out through the egress proxy its node runs for it, which keeps to the policy's
allowlist and refuses the cluster's own machines.
"""

from __future__ import annotations

import contextlib
import hashlib
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest

from tests.docker.cluster_rig import Cluster, module_cluster
from tests.docker.node_plane import plane_dir, user_client
from tests.docker.test_cluster_serve import Plane
from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.sse import frames

pytestmark = pytest.mark.docker
cluster = module_cluster()

POLICY = """version: 1
defaults:
  limits: {processes: {max_per_session: 2, max_lifetime_s: 3600}}
images: {code_exec: tools-runner, terminal: tools-runner}
profiles:
  developer:
    allow: [group:exec, group:fs]
    limits: {ports: true}
  short:
    allow: [group:exec, group:fs]
    limits: {processes: {max_lifetime_s: 3}}
  online:
    allow: [group:exec, group:fs]
    tools:
      terminal: {network: egress, egress: [ALLOWED, HEAD]}
network: {egress_allowlist: [ALLOWED, HEAD]}
tenants:
  "*": {profiles: [developer, short, online], default_profile: developer}
"""
# Two global addresses put on the loopback device of the session's node's own network
# namespace (made by the local cluster; it routes nowhere but to the head), each served on
# port 80 there: the node's proxy reaches them inside that namespace and nowhere else.
ALLOWED, HIDDEN = "11.0.0.1", "11.0.0.2"
ECHOER = ('cat in.txt; echo ready; while read line; do echo "got $line"; '
          'echo "$line" >> heard.txt; done')


def serve(tmp: Path, cluster: Cluster) -> Server:
    return start_server(tmp, tmp / "policy.yaml", {"NAVI_CLUSTER": cluster.address,
                                                   "NAVI_WARM_POOL_SIZE": "0"}, ready_s=180)


@pytest.fixture(scope="module")
def plane(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    tmp = plane_dir(cluster, tmp_path_factory)
    head = cluster.state["head_ip"]  # a cluster machine: the Ray head, the drivers' node
    (tmp / "policy.yaml").write_text(POLICY.replace("ALLOWED", ALLOWED).replace("HEAD", head))
    made = Plane(serve(tmp, cluster), tmp)
    yield made
    stop_server(made.server)  # the last one (the last test restarts it)


def client(plane: Plane) -> httpx.Client:
    return user_client(plane.server.url, plane.user, 120)


def engine_of(cluster: Cluster, node: str) -> docker.APIClient:
    found = next(n for n in cluster.state["nodes"] if n["id"] == node)
    return docker.APIClient(base_url=f"unix://{found['socket']}")


def containers_of(api: docker.APIClient, pid: str) -> list[dict[str, Any]]:
    return list(api.containers(all=True, filters={"label": f"navi.process={pid}"}))


def wait_for(check: Callable[[], Any], within_s: float = 30, what: str = "") -> Any:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"not within {within_s} s: {what}")


def start(c: httpx.Client, session: str, command: str, **body: Any) -> dict[str, Any]:
    made = c.post(f"/v1/sessions/{session}/processes", json={"command": command, **body})
    assert made.status_code == 201, made.text
    return dict(made.json())


def output(c: httpx.Client, session: str, pid: str) -> str:
    got = c.get(f"/v1/sessions/{session}/processes/{pid}/output")
    assert got.status_code == 200, got.text
    return str(got.json()["output"])


def ended(c: httpx.Client, session: str, pid: str, within_s: float = 30) -> dict[str, Any]:
    return dict(wait_for(
        lambda: (p := c.get(f"/v1/sessions/{session}/processes/{pid}").json())["state"]
        == "exited" and p, within_s, f"{pid} to end"))


def watch(plane: Plane, session: str, into: list[dict[str, Any]]) -> threading.Event:
    """The session's events, collected on a thread until the returned event is set."""
    stop = threading.Event()

    def read() -> None:
        with client(plane) as c, c.stream("GET", f"/v1/sessions/{session}/events",
                                          timeout=90) as resp:
            for _id, event in frames(resp):
                into.append(event)
                if stop.is_set():
                    return

    threading.Thread(target=read, daemon=True).start()
    time.sleep(0.5)
    return stop


def test_a_process_on_a_node_runs_there_takes_input_stops_and_is_audited(
    plane: Plane, cluster: Cluster, docker_api: docker.APIClient,
) -> None:
    made = plane.session()
    s, node = made["id"], made["node"]
    assert node in ("n1", "n2"), made
    engine = engine_of(cluster, node)
    events: list[dict[str, Any]] = []
    stop_watching = watch(plane, s, events)
    with client(plane) as c:
        assert c.put(f"/v1/sessions/{s}/files/in.txt", content=b"from the api\n"
                     ).status_code == 201
        proc = start(c, s, ECHOER, name="echoer")
        pid = proc["id"]
        assert (proc["state"], proc["node"], proc["name"]) == ("running", node, "echoer")
        [there] = containers_of(engine, pid)  # on the node's engine, not on ours
        assert there["State"] == "running" and not containers_of(docker_api, pid)
        waited = c.post(f"/v1/sessions/{s}/exec", json={"tool": "process_wait", "args": {
            "process_id": pid, "pattern": "^ready$", "timeout_s": 60}})
        assert waited.status_code == 200, waited.text
        assert waited.json()["metadata"]["wait"]["matched"], waited.json()
        assert output(c, s, pid) == "from the api\nready\n"  # its /workspace: the node's
        sent = c.post(f"/v1/sessions/{s}/processes/{pid}/input", json={"data": "hello\n"})
        assert sent.status_code == 204, sent.text
        wait_for(lambda: "got hello" in output(c, s, pid), what="its answer")
        assert c.get(f"/v1/sessions/{s}/files/heard.txt").content == b"hello\n"
        reader = start(c, s, "cat; echo cat-ended-$?")["id"]
        assert c.post(f"/v1/sessions/{s}/processes/{reader}/input",
                      json={"data": "last words\n", "eof": True}).status_code == 204
        assert ended(c, s, reader)["exit_code"] == 0  # cat read EOF
        assert output(c, s, reader) == "last words\ncat-ended-0\n"
        flood = start(c, s, "head -c 3000000 /dev/zero | tr '\\0' x; echo; echo done")["id"]
        assert ended(c, s, flood, within_s=60)["exit_code"] == 0
        tail = c.get(f"/v1/sessions/{s}/processes/{flood}/output",
                     params={"since": 3000000}).json()
        assert (tail["output"], tail["next"]) == ("\ndone\n", 3000006)  # every byte, in order
        assert c.delete(f"/v1/sessions/{s}/processes/{pid}").status_code == 204
        done = c.get(f"/v1/sessions/{s}/processes/{pid}").json()
        assert (done["state"], done["reason"], done["exit_code"]) == ("exited", "stopped", 143)
        wait_for(lambda: not containers_of(engine, pid), what="its container removed")
        assert [p["id"] for p in c.get(f"/v1/sessions/{s}/processes").json()] == [
            pid, reader, flood]
    wait_for(lambda: any(e["type"] == "process_exited" and e["process_id"] == pid
                         for e in events), 10, "process_exited")
    stop_watching.set()
    mine = [e for e in events if e.get("process_id", e.get("process", {}).get("id")) == pid]
    assert mine[0]["type"] == "process_started" and mine[0]["process"]["node"] == node
    assert "got hello" in "".join(e["data"] for e in mine if e["type"] == "process_output")
    assert mine[-1] | {"type": "process_exited", "exit_code": 143, "reason": "stopped"} == \
        mine[-1]
    audit = {r["action"]: r for r in plane.audit(session=s) if r.get("object") == pid}
    assert set(audit) == {"process.start", "process.input", "process.signal", "process.exit"}
    assert {r["node"] for r in audit.values()} == {node}
    assert audit["process.start"]["args_sha256"] == hashlib.sha256(ECHOER.encode()).hexdigest()
    assert audit["process.input"]["stdin_sha256"] == hashlib.sha256(b"hello\n").hexdigest()
    assert audit["process.exit"]["exit_code"] == 143
    assert audit["process.exit"]["detail"] == "reason stopped"


def test_limits_lifetime_and_the_sessions_end_on_a_node(
    plane: Plane, cluster: Cluster,
) -> None:
    loop = "while true; do echo tick; sleep 0.2; done"
    with client(plane) as c:
        short = c.post("/v1/sessions", json={"profile": "short"}).json()
        capped = start(c, short["id"], loop)["id"]
        s = plane.session()
        engine = engine_of(cluster, s["node"])
        first, second = (start(c, s["id"], loop)["id"] for _ in range(2))
        third = c.post(f"/v1/sessions/{s['id']}/processes", json={"command": loop})
        assert third.status_code == 429, third.text  # limits.processes.max_per_session
        assert third.json()["error"]["code"] == "quota_exceeded"
        wait_for(lambda: "tick" in output(c, s["id"], second), what="a tick")
        assert len(containers_of(engine, first) + containers_of(engine, second)) == 2
        assert ended(c, short["id"], capped, within_s=30)["reason"] == "lifetime"
        assert c.delete(f"/v1/sessions/{s['id']}").status_code == 204
    wait_for(lambda: not containers_of(engine, first) and not containers_of(engine, second),
             what="the ended session's containers removed")
    exits = {r["object"]: r["detail"] for r in plane.audit(session=s["id"])
             if r.get("action") == "process.exit"}
    assert exits == {first: "reason session_ended", second: "reason session_ended"}


SERVER = "python3 -m http.server 8000 --bind 127.0.0.1"


def test_a_declared_port_on_a_node_through_the_api_a_preview_and_a_later_call(
    plane: Plane, cluster: Cluster,
) -> None:
    s = plane.session()
    with client(plane) as c:
        assert c.put(f"/v1/sessions/{s['id']}/files/site/index.txt", content=b"on the node\n"
                     ).status_code == 201
        pid = start(c, s["id"], SERVER, cwd="site", ports=[8000])["id"]
        base = f"/v1/sessions/{s['id']}/ports/8000"
        got = wait_for(lambda: (r := c.get(f"{base}/index.txt")).status_code == 200 and r,
                       60, "the server to answer through the API")
        assert got.content == b"on the node\n" and got.headers["x-content-type-options"] == \
            "nosniff"
        assert c.get(f"/v1/sessions/{s['id']}/ports/8001/").status_code == 404
        link = c.post(f"/v1/sessions/{s['id']}/previews", json={"port": 8000})
        assert link.status_code == 201, link.text
        url = httpx.URL(link.json()["url"])
        shown = httpx.get(f"http://127.0.0.1:{url.port}/index.txt", timeout=30,
                          headers={"Host": url.netloc.decode()})  # no token: the link's origin
        assert shown.status_code == 200 and shown.content == b"on the node\n", shown.text
        later = c.post(f"/v1/sessions/{s['id']}/exec", json={"tool": "code_exec", "args": {
            "language": "python", "code": "import urllib.request as u\n"
            "print(u.urlopen('http://127.0.0.1:8000/index.txt', timeout=10).read().decode())"}})
        assert later.status_code == 200 and later.json()["stdout"] == "on the node\n\n", \
            later.text
        assert c.delete(f"/v1/sessions/{s['id']}/processes/{pid}").status_code == 204
        assert c.get(f"{base}/index.txt").status_code == 404  # its port went with it
        assert httpx.get(f"http://127.0.0.1:{url.port}/index.txt", timeout=30,
                         headers={"Host": url.netloc.decode()}).status_code != 200


WEB = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread


class Answer(BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("served by " + self.server.server_address[0]).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


for address in sys.argv[1:]:
    Thread(target=ThreadingHTTPServer((address, 80), Answer).serve_forever, daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
"""
FETCH = """
import sys, urllib.error, urllib.request
for host in sys.argv[1:]:
    try:
        got = urllib.request.urlopen(f"http://{host}/", timeout=30).read().decode()
    except urllib.error.HTTPError as exc:
        got = f"{exc.code} {exc.read().decode().strip()}"
    print(host, "->", got, flush=True)
print("fetched", flush=True)
sys.stdin.read()  # until EOF: its proxy is looked at meanwhile
"""


@contextlib.contextmanager
def web_in_namespace(netns: str) -> Iterator[None]:
    """ALLOWED and HIDDEN on the namespace's lo, each served on port 80 there."""
    for address in (ALLOWED, HIDDEN):
        subprocess.run(["ip", "-n", netns, "addr", "add", f"{address}/32", "dev", "lo"],
                       check=True, timeout=30)
    try:
        with subprocess.Popen(["ip", "netns", "exec", netns, sys.executable, "-c", WEB,
                               ALLOWED, HIDDEN], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE) as web:
            try:
                assert web.stdout is not None and web.stdout.readline() == b"ready\n"
                yield
            finally:
                web.kill()
    finally:
        for address in (ALLOWED, HIDDEN):
            subprocess.run(["ip", "-n", netns, "addr", "del", f"{address}/32", "dev", "lo"],
                           timeout=30)


def proxies_on(cluster: Cluster, node: str) -> list[Path]:
    """The egress proxy sockets the node runs now (its data dir, seen from this machine)."""
    from runtime.cluster.local import node_storage
    from runtime.cluster.local.state import NodeRecord

    found = next(n for n in cluster.state["nodes"] if n["id"] == node)
    return sorted((node_storage(NodeRecord.model_validate(found)) / "egress").glob("*.sock"))


def test_a_process_on_a_node_has_egress_through_its_nodes_proxy(
    plane: Plane, cluster: Cluster,
) -> None:
    head = cluster.state["head_ip"]
    with client(plane) as c:
        made = c.post("/v1/sessions", json={"profile": "online"})
        assert made.status_code == 201, made.text
        s, node = made.json()["id"], made.json()["node"]
        netns = next(n["netns"] for n in cluster.state["nodes"] if n["id"] == node)
        assert c.put(f"/v1/sessions/{s}/files/fetch.py", content=FETCH.encode()
                     ).status_code == 201
        before = proxies_on(cluster, node)
        with web_in_namespace(netns):
            pid = start(c, s, f"python3 -u fetch.py {ALLOWED} {HIDDEN} {head}")["id"]
            wait_for(lambda: "fetched" in output(c, s, pid), 90, "its requests")
            running = proxies_on(cluster, node)
            assert c.post(f"/v1/sessions/{s}/processes/{pid}/input",
                          json={"data": "", "eof": True}).status_code == 204
            assert ended(c, s, pid)["exit_code"] == 0
        seen = dict(line.split(" -> ", 1) for line in output(c, s, pid).splitlines()
                    if " -> " in line)
    assert seen == {
        ALLOWED: f"served by {ALLOWED}",
        HIDDEN: f"403 navi egress proxy: {HIDDEN}:80 refused: IP address not in the allowlist",
        head: f"403 navi egress proxy: {head}:80 refused: resolves to a cluster address"}, seen
    assert len(running) == len(before) + 1  # its own proxy on the node, while it ran ...
    wait_for(lambda: proxies_on(cluster, node) == before, 10, "its proxy to end with it")
    [started] = [r for r in plane.audit(session=s) if r["action"] == "process.start"]
    assert started["limits"]["egress"] == [ALLOWED, head] and started["node"] == node


def test_a_stopping_control_plane_ends_its_node_processes(plane: Plane, cluster: Cluster
                                                          ) -> None:
    """Last: it restarts the module's control plane (stopped; the next start adopts those
    a killed one left: tests/docker/test_cluster_adopt.py)."""
    s = plane.session()
    engine = engine_of(cluster, s["node"])
    with client(plane) as c:
        pid = start(c, s["id"], "sleep 600")["id"]
        assert containers_of(engine, pid)
    stop_server(plane.server)
    wait_for(lambda: not containers_of(engine, pid), 30, "its container removed")
    plane.server = serve(plane.tmp, cluster)
    with client(plane) as c:
        done = c.get(f"/v1/sessions/{s['id']}/processes/{pid}").json()
    assert (done["state"], done["reason"]) == ("exited", "interrupted"), done
    exits = [r["detail"] for r in plane.audit(session=s["id"]) if r["action"] == "process.exit"]
    assert exits == ["reason interrupted"]
