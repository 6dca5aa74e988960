"""A tenant's disk quota holds across a real 2-node local cluster, not per node.

One `navi serve` control plane (NAVI_CLUSTER) on the run's shared cluster, with a policy
whose `tenant_disk_mb` has room for exactly two sessions' disks. Each node admits a session
disk against what the tenant holds on it plus what it holds on every other machine
(`runtime.nodes.elsewhere`); without that, a node that holds one of the tenant's sessions
would take a second while the other node holds another. A node counts it too for a
snapshot's copy and for a disk mounted again after its session went idle: it asks the
control plane (`runtime.cluster.agent.asks`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.docker.cluster_rig import Cluster, module_cluster
from tests.docker.node_plane import user_client
from tests.docker.test_cluster_serve import Plane, _policy, served

pytestmark = pytest.mark.docker
cluster = module_cluster()

SESSION_MB, TENANT_MB = 32, 64  # room for exactly two sessions' disks
FILL = "import os\nopen('big', 'wb').write(b'x' * (22 << 20))\nos.sync()\nprint('full')"


def _quota_policy(tmp: Path) -> Path:
    path = _policy(tmp)
    text = path.read_text()
    small = text.replace("    session_disk_mb: 1024", f"    session_disk_mb: {SESSION_MB}"
                         ).replace("    tenant_disk_mb: 10240", f"    tenant_disk_mb: {TENANT_MB}")
    assert f"tenant_disk_mb: {TENANT_MB}" in small and f"session_disk_mb: {SESSION_MB}" in small
    path.write_text(small)
    return path


@pytest.fixture(scope="module")
def plane(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    with served(cluster, tmp_path_factory, _quota_policy) as made:
        yield made


def client(plane: Plane) -> httpx.Client:
    return user_client(plane.server.url, plane.user, 120)


def full_session(plane: Plane) -> dict[str, str]:
    """A new session on a node, holding 22 of its 32 MiB (so it counts idle or not)."""
    made = plane.session()
    assert made["node"] in ("n1", "n2"), made
    out = plane.run(made["id"], FILL, timeout=120)
    assert out.status_code == 200 and out.json()["stdout"] == "full\n", out.text
    return made


def assert_quota_refused(resp: httpx.Response) -> None:
    """As on one machine (tests/tenancy/test_disk.py): 413 `disk_quota`, naming the quota."""
    assert resp.status_code == 413, resp.text
    error = resp.json()["error"]
    assert error["code"] == "disk_quota" and f"{TENANT_MB} MiB" in error["message"], error


def test_the_tenant_disk_quota_counts_its_disks_on_every_node(plane: Plane) -> None:
    first, second = full_session(plane), full_session(plane)
    assert {first["node"], second["node"]} == {"n1", "n2"}  # one on each node
    with client(plane) as c:
        assert_quota_refused(c.post("/v1/sessions", json={}))
        assert_quota_refused(c.post(f"/v1/sessions/{first['id']}/fork", json={}))
        assert len(c.get("/v1/sessions").json()) == 2  # the refused ones left nothing
        assert c.delete(f"/v1/sessions/{second['id']}").status_code == 204
        again = c.post("/v1/sessions", json={})
        assert again.status_code == 201, again.text


def clear(plane: Plane) -> None:
    """The tenant's sessions of earlier tests deleted (they count in its quota)."""
    with client(plane) as c:
        for made in c.get("/v1/sessions").json():
            assert c.delete(f"/v1/sessions/{made['id']}").status_code == 204


def test_a_snapshot_counts_what_the_tenant_holds_on_the_other_node(plane: Plane) -> None:
    clear(plane)
    first, second = full_session(plane), full_session(plane)
    assert {first["node"], second["node"]} == {"n1", "n2"}
    snapshots = f"/v1/sessions/{first['id']}/snapshots"
    with client(plane) as c:  # its node alone: 32 MiB in use + 22 copied fit in 64
        assert_quota_refused(c.post(snapshots, json={}))
        assert c.get(snapshots).json() == []  # nothing was copied
        assert c.delete(f"/v1/sessions/{second['id']}").status_code == 204
        made = c.post(snapshots, json={})
        assert made.status_code == 201, made.text


def test_a_disk_mounted_again_counts_what_the_tenant_holds_on_the_other_node(
    plane: Plane,
) -> None:
    clear(plane)
    idle = plane.session()
    at = f"/v1/sessions/{idle['id']}"
    with client(plane) as c:
        snap = c.post(f"{at}/snapshots", json={})
        assert snap.status_code == 201, snap.text
        # a restore leaves the session's disk released on its node: the next use mounts it
        assert c.post(f"{at}/snapshots/{snap.json()['id']}/restore").status_code == 200
        assert c.get(at).json()["state"] == "idle"
        other = plane.session()  # fits: the idle one counts at what it holds (< 2 MiB)
        assert other["node"] != idle["node"]
        busy = plane.run(idle["id"], "print(1)")  # 32 MiB mounted again + 32 there > 64
        assert busy.status_code == 429, busy.text
        assert busy.json()["error"]["code"] == "disk_quota", busy.text
        assert int(busy.headers["Retry-After"]) > 0
        assert c.get(at).json()["state"] == "idle"  # not mounted
        assert c.delete(f"/v1/sessions/{other['id']}").status_code == 204
        again = plane.run(idle["id"], "print(1)")
        assert again.status_code == 200 and again.json()["stdout"] == "1\n", again.text
        assert c.get(at).json()["state"] == "active"
