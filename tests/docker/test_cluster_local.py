"""`navi cluster local up|status|down` as real processes: one 2-node cluster for the module.

The cluster is real: a Ray head, two nodes each in its own network namespace with its own
Docker engine. Ray drivers run in subprocesses (never `ray.init` in the test process), with
the cluster's token; a driver without it must be refused by the head.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runtime.cluster.local import netns
from tests.docker.cluster_rig import IMAGE, Cluster, navi, own_cluster, status

pytestmark = pytest.mark.docker
cluster = own_cluster()  # its own: the tests kill raylets and take it down


def driver(cluster: Cluster, code: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """A Ray driver in a subprocess; `code` sees `ray` and `ADDRESS`."""
    script = f"import ray, sys\nADDRESS = {cluster.address!r}\n{code}"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    return subprocess.Popen([sys.executable, "-c", script], env={**clean, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def with_token(cluster: Cluster) -> dict[str, str]:
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": cluster.state["token_file"]}


def running(pid: int) -> bool:
    """Alive and not a zombie (a zombie has ended; only its parent's wait is missing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def net_inode(pid: int) -> int:
    return os.stat(f"/proc/{pid}/ns/net").st_ino


def test_up_starts_two_alive_nodes_each_in_its_own_namespace(cluster: Cluster) -> None:
    assert cluster.up.stdout.strip().splitlines()[-1].startswith("NAVI_CLUSTER=")
    found = status(cluster.dir)
    assert found["address"] == cluster.address
    assert [n["state"] for n in found["nodes"]] == ["alive", "alive"]
    host = net_inode(os.getpid())
    inodes = set()
    for node in found["nodes"]:
        pids = node["pids"]
        for name in ("dockerd", "containerd", "raylet"):
            assert name in pids, (node["id"], pids)
        own = {net_inode(pid) for pid in pids.values()}
        assert len(own) == 1 and host not in own, node
        inodes |= own
    assert len(inodes) == 2
    assert "gcs_server" in found["head"]["pids"]
    token = Path(cluster.state["token_file"])
    assert token.stat().st_mode & 0o777 == 0o600 and len(token.read_text()) >= 32


def test_up_again_says_it_is_up_and_changes_nothing(cluster: Cluster) -> None:
    before = status(cluster.dir)
    again = navi("up", "--nodes", "2", "--dir", str(cluster.dir), "--image", IMAGE)
    assert again.returncode == 0 and "already up" in again.stderr
    assert again.stdout.strip().splitlines()[-1] == f"NAVI_CLUSTER={cluster.address}"
    assert daemons(status(cluster.dir)) == daemons(before)


def daemons(found: dict) -> list[dict]:
    """Each node as `up` made it: its daemons' pids, not the container shims and Ray
    workers that come and go with the node's work (a warm container's shim made between
    the two reads is no change `up` made)."""
    kept = ("dockerd", "containerd", "raylet", "ray::NodeAgent")
    return [{**{k: n[k] for k in ("id", "state", "ip", "socket")},
             "pids": {k: n["pids"].get(k) for k in kept}} for n in found["nodes"]]


TASK = """
import json, os, subprocess
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init(address=ADDRESS, logging_level="ERROR", log_to_driver=False)

@ray.remote(num_cpus=0, resources={"navi_node": 0.01})
def on_node(image):
    info = subprocess.run(["docker", "info", "--format", "{{.DockerRootDir}}"],
                          capture_output=True, text=True)
    run = subprocess.run(["docker", "run", "--rm", "--network", "none", "--cap-drop", "ALL",
                          "--security-opt", "no-new-privileges", "--read-only",
                          "--user", "65534:65534", image, "python3", "-c", "print(1)"],
                          capture_output=True, text=True)
    return {"root": info.stdout.strip(), "run": run.stdout.strip(), "err": run.stderr}

out = {}
for node in ray.nodes():
    if node["Alive"] and node["Resources"].get("navi_node"):
        pin = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        out[node["NodeManagerAddress"]] = ray.get(
            on_node.options(scheduling_strategy=pin).remote(sys.argv[1]))
print(json.dumps(out))
"""


def test_a_task_pinned_to_each_node_runs_on_that_nodes_engine(cluster: Cluster) -> None:
    proc = driver(cluster, TASK.replace("sys.argv[1]", repr(IMAGE)), with_token(cluster))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    ran = json.loads(out.strip().splitlines()[-1])
    host_root = subprocess.run(["docker", "info", "--format", "{{.DockerRootDir}}"],
                               capture_output=True, text=True).stdout.strip()
    expected = {n["node_ip"]: n["data_root"] for n in cluster.state["nodes"]}
    assert {ip: r["root"] for ip, r in ran.items()} == expected  # each node's own engine
    assert host_root not in expected.values()
    assert [r["run"] for r in ran.values()] == ["1", "1"], ran


@pytest.mark.parametrize("env", [{}, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64}],
                         ids=["no-token", "wrong-token"])
def test_a_client_without_the_token_is_refused(cluster: Cluster, env: dict[str, str]) -> None:
    proc = driver(cluster, "ray.init(address=ADDRESS)\nprint('CONNECTED')", env)
    refused = False
    deadline = time.monotonic() + 60
    assert proc.stderr is not None
    try:
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            if "Unauthenticated" in line and "InvalidAuthToken" in line:
                refused = True
                break
    finally:
        proc.kill()
        out, _ = proc.communicate(timeout=30)
    assert refused and "CONNECTED" not in out


def test_the_control_planes_link_joins_with_the_token_file_even_after_ray_was_imported(
    cluster: Cluster,
) -> None:
    """Ray caches its auth settings at first import; link.connect reads them again."""
    code = ("import ray\nfrom pathlib import Path\nfrom runtime.cluster import link\n"
            f"link.connect({cluster.address!r}, Path({cluster.state['token_file']!r}))\n"
            "print(sorted((n.id, n.alive) for n in link.nodes()))\nlink.disconnect()")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    done = subprocess.run([sys.executable, "-c", code], env=clean, capture_output=True,
                          text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[('n1', True), ('n2', True)]"


def test_a_killed_raylet_shows_its_node_dead(cluster: Cluster) -> None:
    raylet = status(cluster.dir)["nodes"][1]["pids"]["raylet"]
    os.kill(raylet, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        states = [n["state"] for n in status(cluster.dir)["nodes"]]
        if states == ["alive", "dead"]:
            break
        time.sleep(0.2)
    assert states == ["alive", "dead"]


def test_a_half_failed_up_removes_what_it_made(
    cluster: Cluster, tmp_path: Path
) -> None:
    slot = next(k for k in range(netns.MAX_SLOTS) if not netns.slot_in_use(k))
    with socket.socket() as busy:  # the head of that slot cannot take its port
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("0.0.0.0", 20000 + 100 * slot + 3))
        busy.listen()
        done = navi("up", "--nodes", "1", "--dir", str(tmp_path / "half"), "--image", IMAGE)
    assert done.returncode == 1 and "error:" in done.stderr, done.stderr
    assert not netns.slot_in_use(slot)
    assert not (tmp_path / "half").exists()
    assert not Path(f"/run/navi-c{slot}").exists()
    assert not Path(f"/tmp/navi-ray-c{slot}").exists()


def test_down_ends_every_process_and_removes_what_up_made(cluster: Cluster) -> None:
    before = status(cluster.dir)
    pids = [p for n in before["nodes"] for p in n["pids"].values()]
    pids += list(before["head"]["pids"].values())
    slot = cluster.state["slot"]
    t0 = time.monotonic()
    done = navi("down", "--dir", str(cluster.dir))
    print(f"\nlocal cluster down in {time.monotonic() - t0:.1f} s")
    assert done.returncode == 0, done.stderr
    assert [p for p in pids if running(p)] == []
    assert not [n for n in os.listdir("/run/netns") if n.startswith(f"navi-c{slot}-")]
    assert not [v for v in os.listdir("/sys/class/net") if v.startswith(f"navic{slot}n")]
    mounts = Path("/proc/self/mounts").read_text()
    assert str(cluster.dir) not in mounts and f"/run/navi-c{slot}" not in mounts
    for path in (cluster.dir, Path(f"/run/navi-c{slot}"), Path(f"/tmp/navi-ray-c{slot}")):
        assert not path.exists(), path
    again = navi("down", "--dir", str(cluster.dir))
    assert again.returncode == 0 and "no local cluster" in again.stderr
    assert navi("status", "--dir", str(cluster.dir)).returncode == 1
