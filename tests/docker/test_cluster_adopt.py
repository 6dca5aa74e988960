"""A control plane's next start adopts the background processes its cluster nodes still run.

One `navi serve` (NAVI_CLUSTER, keeping processes at a stop) on the run's shared 2-node local
cluster, restarted twice: killed (-9), then stopped. Each time the node goes on running the
session's processes and keeps their output; the next start re-attaches them
(`runtime.processes.adopt_node`): the same ids are `running`, the counter's output goes on
with every line once (nothing lost or doubled across the restart), its port and preview
link answer, the reader still takes input; then EOF and a stop end them, recorded. One
that ended while no control plane read it is adopted too: its last output comes in and it
ends with its own exit code.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.docker.cluster_rig import Cluster, module_cluster
from tests.docker.node_plane import plane_dir, user_client
from tests.docker.test_cluster_processes import (
    containers_of,
    ended,
    engine_of,
    output,
    start,
    wait_for,
)
from tests.docker.test_cluster_serve import Plane
from tests.e2e.conftest import Server, start_server, stop_server

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
tenants:
  "*": {profiles: [developer], default_profile: developer}
"""
COUNTER = ("python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 & "
           "i=0; while true; do echo \"tick $i\"; i=$((i+1)); sleep 0.2; done")
READER = 'echo ready; while read line; do echo "got $line"; done; echo eof'


def serve(tmp: Path, cluster: Cluster) -> Server:
    return start_server(tmp, tmp / "policy.yaml", {
        "NAVI_CLUSTER": cluster.address, "NAVI_WARM_POOL_SIZE": "0",
        "NAVI_PROCESS_KEEP_ON_SHUTDOWN": "1"}, ready_s=180)


@pytest.fixture(scope="module")
def plane(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    tmp = plane_dir(cluster, tmp_path_factory)
    (tmp / "policy.yaml").write_text(POLICY)
    made = Plane(serve(tmp, cluster), tmp)
    yield made
    stop_server(made.server)  # the last one (the test restarts it)


def ticks(c: httpx.Client, session: str, pid: str) -> list[int]:
    return [int(line.split()[1]) for line in output(c, session, pid).splitlines()]


def restart(plane: Plane, cluster: Cluster, *, kill: bool) -> None:
    if kill:
        plane.server.process.kill()
    stop_server(plane.server)
    time.sleep(2)  # its node goes on running them for nobody
    plane.server = serve(plane.tmp, cluster)


def test_node_processes_are_adopted_after_a_crash_and_after_a_keeping_stop(
    plane: Plane, cluster: Cluster,
) -> None:
    s = plane.session()
    sid = s["id"]
    engine = engine_of(cluster, s["node"])
    with user_client(plane.server.url, plane.user, 120) as c:
        assert c.put(f"/v1/sessions/{sid}/files/site/index.txt", content=b"served\n"
                     ).status_code == 201
        counter = start(c, sid, COUNTER, cwd="site", ports=[8000])["id"]
        reader = start(c, sid, READER)["id"]
        wait_for(lambda: len(ticks(c, sid, counter)) >= 3, what="3 ticks")
        wait_for(lambda: output(c, sid, reader) == "ready\n", what="the reader")
        link = c.post(f"/v1/sessions/{sid}/previews", json={"port": 8000})
        assert link.status_code == 201, link.text
        link_id = link.json()["id"]
    [there] = [x["Id"] for x in containers_of(engine, counter)]

    for how in ("killed", "stopped"):
        with user_client(plane.server.url, plane.user, 120) as c:
            before = ticks(c, sid, counter)[-1]
            other = plane.session()["id"]  # one that ends while no control plane reads it
            brief = start(c, other, f"echo {how}; sleep 3; echo bye >&2; exit 3")["id"]
        restart(plane, cluster, kill=how == "killed")
        with user_client(plane.server.url, plane.user, 120) as c:
            done = ended(c, other, brief)  # adopted, its rest of output in, its own end
            assert (done["reason"], done["exit_code"]) == ("exited", 3), (how, done)
            assert output(c, other, brief) == f"{how}\nbye\n", how
            for pid in (counter, reader):
                got = c.get(f"/v1/sessions/{sid}/processes/{pid}").json()
                assert (got["state"], got["node"]) == ("running", s["node"]), (how, got)
            wanted = before + 15  # 3 s of new ticks

            def new_ticks(c: httpx.Client = c, wanted: int = wanted) -> list[int]:
                got = ticks(c, sid, counter)
                return got if got[-1] > wanted else []

            later = wait_for(new_ticks, 30, f"new ticks after the start ({how})")
            assert later == list(range(len(later))), how  # every tick once, in order
            served = wait_for(
                lambda c=c: (r := c.get(f"/v1/sessions/{sid}/ports/8000/index.txt")
                             ).status_code == 200 and r, 30, f"its port ({how})")
            assert served.content == b"served\n"
            [kept] = [k for k in c.get(f"/v1/sessions/{sid}/previews").json()
                      if k["id"] == link_id]  # the same link (on the new origin's port)
            url = httpx.URL(kept["url"])
            shown = httpx.get(f"http://127.0.0.1:{url.port}/index.txt", timeout=30,
                              headers={"Host": url.netloc.decode()})
            assert shown.status_code == 200 and shown.content == b"served\n", (how, shown)
            sent = c.post(f"/v1/sessions/{sid}/processes/{reader}/input",
                          json={"data": f"after {how}\n"})
            assert sent.status_code == 204, sent.text
            answer = f"got after {how}\n"
            wait_for(lambda c=c, answer=answer: answer in output(c, sid, reader), 30,
                     f"the reader's answer ({how})")
        assert [x["Id"] for x in containers_of(engine, counter)] == [there]  # the same one

    with user_client(plane.server.url, plane.user, 120) as c:
        assert c.post(f"/v1/sessions/{sid}/processes/{reader}/input",
                      json={"data": "", "eof": True}).status_code == 204
        done = ended(c, sid, reader)
        assert (done["reason"], done["exit_code"]) == ("exited", 0), done
        assert output(c, sid, reader) == "ready\ngot after killed\ngot after stopped\neof\n"
        assert c.delete(f"/v1/sessions/{sid}/processes/{counter}").status_code == 204
        done = c.get(f"/v1/sessions/{sid}/processes/{counter}").json()
        assert (done["state"], done["reason"], done["exit_code"]) == ("exited", "stopped", 143)
    wait_for(lambda: not containers_of(engine, counter) and not containers_of(engine, reader),
             30, "their containers removed on the node")
    exits = {r["object"]: r["detail"] for r in plane.audit(session=sid)
             if r["action"] == "process.exit"}
    assert exits == {counter: "reason stopped", reader: "reason exited"}
