"""Snapshots, restore, fork and `navi backup` of sessions on a cluster node, for real.

One 2-node local cluster and one `navi serve` control plane (NAVI_CLUSTER) for the module:
every session here lives on a node (n1 or n2), whose disk the control plane does not see
(each node's data dir in its own mount namespace). The snapshot work is done by the node
agent, asked by ids (`runtime.cluster.control.snapshots`); the audit record, the 409 rules and
the quota stay on the control plane; `navi backup` streams the node disks from the agents.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.docker.cluster_rig import Cluster, module_cluster
from tests.docker.node_plane import user_client
from tests.docker.test_cluster_serve import Plane, served
from tests.e2e.conftest import ROOT

pytestmark = pytest.mark.docker
cluster = module_cluster()


@pytest.fixture(scope="module")
def plane(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    with served(cluster, tmp_path_factory) as made:
        yield made


def client(plane: Plane) -> httpx.Client:
    return user_client(plane.server.url, plane.user, 120)


def put(plane: Plane, session: str, path: str, data: bytes) -> None:
    with client(plane) as c:
        done = c.put(f"/v1/sessions/{session}/files/{path}", content=data)
        assert done.status_code in (200, 201), done.text


def read(plane: Plane, session: str, path: str) -> bytes:
    with client(plane) as c:
        got = c.get(f"/v1/sessions/{session}/files/{path}")
        assert got.status_code == 200, got.text
        return got.content


def snapshot(plane: Plane, session: str, name: str) -> dict[str, Any]:
    with client(plane) as c:
        made = c.post(f"/v1/sessions/{session}/snapshots", json={"name": name})
        assert made.status_code == 201, made.text
        return dict(made.json())


def node_session(plane: Plane) -> dict[str, Any]:
    made = plane.session()
    assert made["node"] in ("n1", "n2"), made  # on a node, never the control plane
    return made


def test_snapshot_change_restore_on_a_node_session_brings_the_old_file_back(
    plane: Plane,
) -> None:
    s = node_session(plane)["id"]
    put(plane, s, "notes/today.txt", b"before\n")
    snap = snapshot(plane, s, "before the change")
    assert snap["bytes"] > 0 and snap["name"] == "before the change"
    put(plane, s, "notes/today.txt", b"after\n")
    put(plane, s, "new.txt", b"made after the snapshot")
    with client(plane) as c:
        listed = c.get(f"/v1/sessions/{s}/snapshots").json()
        assert [x["id"] for x in listed] == [snap["id"]]
        restored = c.post(f"/v1/sessions/{s}/snapshots/{snap['id']}/restore")
        assert restored.status_code == 200, restored.text
        assert restored.json() == snap
        assert c.get(f"/v1/sessions/{s}/files/new.txt").status_code == 404
        other = c.post(f"/v1/sessions/{s}/snapshots/sn_0123456789abcdef/restore")
        assert other.status_code == 404, other.text
    assert read(plane, s, "notes/today.txt") == b"before\n"
    out = plane.run(s, "print(open('notes/today.txt').read().strip())")  # a call sees it
    assert out.status_code == 200 and out.json()["stdout"] == "before\n", out.text
    with client(plane) as c:
        assert c.delete(f"/v1/sessions/{s}/snapshots/{snap['id']}").status_code == 204
        assert c.get(f"/v1/sessions/{s}/snapshots").json() == []
    records = plane.audit(session=s)
    changes = [(r["action"], r["object"], r["node"]) for r in records
               if r["kind"] == "action" and r["action"].startswith("snapshot.")]
    node = records[0]["node"]
    assert changes == [("snapshot.create", snap["id"], node),
                       ("snapshot.restore", snap["id"], node),
                       ("snapshot.delete", snap["id"], node)]


def test_a_restore_while_a_call_runs_on_the_node_is_session_busy(plane: Plane) -> None:
    s = node_session(plane)["id"]
    snap = snapshot(plane, s, "empty")
    call = threading.Thread(target=plane.run, args=(s, "import time; time.sleep(6)"))
    call.start()
    answers = []
    try:
        with client(plane) as c:
            while call.is_alive() and 409 not in answers:
                got = c.post(f"/v1/sessions/{s}/snapshots/{snap['id']}/restore")
                answers.append(got.status_code)
                if got.status_code == 409:
                    assert got.json()["error"]["code"] == "session_busy", got.text
                time.sleep(0.2)
    finally:
        call.join(timeout=60)
    assert 409 in answers, answers
    assert set(answers) <= {200, 409}, answers


def test_a_fork_of_a_node_session_has_its_files_on_the_same_node(plane: Plane) -> None:
    source = node_session(plane)
    s = source["id"]
    put(plane, s, "a.txt", b"one")
    snap = snapshot(plane, s, "one")
    put(plane, s, "a.txt", b"two")
    with client(plane) as c:
        now = c.post(f"/v1/sessions/{s}/fork", json={})
        assert now.status_code == 201, now.text
        then = c.post(f"/v1/sessions/{s}/fork", json={"snapshot": snap["id"]})
        assert then.status_code == 201, then.text
    forked, from_snap = now.json(), then.json()
    assert forked["node"] == from_snap["node"] == source["node"]
    assert read(plane, forked["id"], "a.txt") == b"two"
    assert read(plane, from_snap["id"], "a.txt") == b"one"
    put(plane, forked["id"], "a.txt", b"the fork's own")  # independent of its source
    assert read(plane, s, "a.txt") == b"two"
    forks = [(r["object"], r["detail"]) for r in plane.audit(session=s)
             if r["action"] == "session.fork"]
    assert forks == [(forked["id"], f"from {s}"),
                     (from_snap["id"], f"from {s} snapshot {snap['id']}")]


def navi_cli(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    """`navi backup|restore ...` as an operator runs it on a cluster (NAVI_CLUSTER set)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    return subprocess.run([sys.executable, "-m", "runtime.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**env, "NAVI_CLUSTER": cluster.address})


def debugfs_cat(image: Path, path: str) -> bytes:
    done = subprocess.run(["debugfs", "-R", f"cat {path}", str(image)], capture_output=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_navi_backup_holds_the_files_of_sessions_on_nodes(
    plane: Plane, cluster: Cluster, tmp_path: Path
) -> None:
    sessions = [node_session(plane)]
    while len(sessions) < 4 and {s["node"] for s in sessions} != {"n1", "n2"}:
        sessions.append(node_session(plane))  # placement alternates: one on each node
    assert {s["node"] for s in sessions} == {"n1", "n2"}
    for n, s in enumerate(sessions):
        put(plane, s["id"], "kept/in-backup.txt", f"file {n} of {s['id']}".encode())
    snap = snapshot(plane, sessions[0]["id"], "kept")
    dest = tmp_path / "backup"
    t0 = time.monotonic()
    done = navi_cli(cluster, "backup", str(dest), "--json", "--data-dir",
                    str(plane.server.data_dir))
    took = time.monotonic() - t0
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = json.loads(done.stdout.strip().splitlines()[-1])
    disks = manifest["disks"]["disks"]
    print(f"\nbackup of {len(disks)} node images: "
          f"{sum(d['stored'] for d in disks):,} bytes stored, {took:.1f} s (CLI), "
          f"disks {manifest['disks']['seconds']} s")
    for n, s in enumerate(sessions):
        mine = [d for d in disks if d["session"] == s["id"]]
        assert [(d["kind"], d["node"]) for d in mine if d["kind"] == "session"] == [
            ("session", s["node"])], mine
        image = dest / next(d["path"] for d in mine if d["kind"] == "session")
        assert debugfs_cat(image, "/workspace/kept/in-backup.txt") == \
            f"file {n} of {s['id']}".encode()
    snaps = [d for d in disks if d["kind"] == "snapshot"]
    assert [Path(d["path"]).name for d in snaps if d["session"] == sessions[0]["id"]] == [
        f"{snap['id']}.img"]
    assert not [k for k in manifest["disks"]["skipped"] if k["reason"] == "other_node"]
    assert manifest["verified"]["ok"]


def test_navi_restore_puts_a_node_sessions_disk_back_on_its_node(
    plane: Plane, cluster: Cluster, tmp_path: Path
) -> None:
    session = node_session(plane)
    s = session["id"]
    put(plane, s, "kept.txt", b"as in the backup")
    snap = snapshot(plane, s, "kept")
    done = navi_cli(cluster, "backup", str(tmp_path / "backup"), "--json", "--data-dir",
                    str(plane.server.data_dir))
    assert done.returncode == 0, done.stderr[-3000:]
    put(plane, s, "kept.txt", b"changed after the backup")
    put(plane, s, "later.txt", b"made after the backup")
    with client(plane) as c:
        assert c.delete(f"/v1/sessions/{s}/snapshots/{snap['id']}").status_code == 204
    # a restore into a new data dir (the control plane's own state is not under test here);
    # the node disks go back to their nodes, under the running control plane's sessions
    done = navi_cli(cluster, "restore", str(tmp_path / "backup"), "--json", "--data-dir",
                    str(tmp_path / "restored"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert read(plane, s, "kept.txt") == b"as in the backup"
    with client(plane) as c:
        assert c.get(f"/v1/sessions/{s}/files/later.txt").status_code == 404
        assert [x["id"] for x in c.get(f"/v1/sessions/{s}/snapshots").json()] == [snap["id"]]
    assert not list((tmp_path / "restored" / "workspaces").rglob(f"{s}.img"))  # not here


def node_storage(cluster: Cluster, node: str) -> Path:
    """The node's data dir as this machine keeps it (the node sees it in its own namespace)."""
    record = next(n for n in cluster.state["nodes"] if n["id"] == node)
    return Path(record["data_root"]).parent / "navi"


def tree(root: Path) -> dict[str, bytes | None]:
    return {p.relative_to(root).as_posix(): p.read_bytes() if p.is_file() else None
            for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("fault", ["refused", "unreachable"])
def test_a_restore_a_node_fails_changes_nothing_on_the_other_node_nor_the_data_dir(
    plane: Plane, cluster: Cluster, tmp_path: Path, fault: str
) -> None:
    """`navi restore` stages every image on every node before any node swaps one in: when
    n2 refuses an image (or the manifest's node for them is down), n1, which had already
    received and staged its session's disk, keeps the disk it had, and so does the data dir."""
    on: dict[str, dict[str, Any]] = {}
    while len(on) < 2:
        made = node_session(plane)
        on.setdefault(made["node"], made)
    a, b = on["n1"]["id"], on["n2"]["id"]
    for s in (a, b):
        put(plane, s, "kept.txt", b"as in the backup")
    snap = snapshot(plane, b, "kept")
    backup = tmp_path / "backup"
    done = navi_cli(cluster, "backup", str(backup), "--json", "--data-dir",
                    str(plane.server.data_dir))
    assert done.returncode == 0, done.stderr[-3000:]
    for s in (a, b):
        put(plane, s, "kept.txt", b"changed after the backup")
        put(plane, s, "later.txt", b"made after the backup")
    manifest = json.loads((backup / "backup.json").read_text())
    mine = [d for d in manifest["disks"]["disks"] if d["session"] in (a, b)]
    assert {(d["node"], d["kind"]) for d in mine} == {
        ("n1", "session"), ("n2", "session"), ("n2", "snapshot")}
    mine.sort(key=lambda d: (d["node"], d["kind"]))  # n1's disk is sent (and staged) first
    if fault == "unreachable":
        for d in mine:
            if d["node"] == "n2":
                d["node"] = "n9"  # a node the cluster does not have up
    manifest["disks"]["disks"] = mine
    (backup / "backup.json").write_text(json.dumps(manifest))
    target = tmp_path / "target"  # a stopped control plane's data dir, replaced with --force
    (target / "workspaces" / "t_old").mkdir(parents=True)
    (target / "navi.sqlite3").write_bytes(b"the store before the restore")
    (target / "workspaces" / "t_old" / "s_old.img").write_bytes(b"an image before it")
    before = tree(target)
    snaps = node_storage(cluster, "n2") / "workspaces" / mine[0]["tenant"] / f"{b}.snapshots"
    if fault == "refused":  # n2 cannot make its snapshot's part file: it refuses that image
        snaps.rename(snaps.with_name(snaps.name + ".away"))
        snaps.write_bytes(b"")
    try:
        done = navi_cli(cluster, "restore", str(backup), "--force", "--data-dir", str(target))
    finally:
        if fault == "refused":
            snaps.unlink()
            snaps.with_name(snaps.name + ".away").rename(snaps)
    assert done.returncode == 2, (done.stdout[-2000:], done.stderr[-3000:])
    named = "node n2 refused" if fault == "refused" else "node n9"
    assert named in done.stderr and "nothing was restored" in done.stderr, done.stderr
    assert tree(target) == before  # no pre-restore-*, no staging left, not a byte changed
    for s in (a, b):
        assert read(plane, s, "kept.txt") == b"changed after the backup"
        assert read(plane, s, "later.txt") == b"made after the backup"
    with client(plane) as c:
        assert [x["id"] for x in c.get(f"/v1/sessions/{b}/snapshots").json()] == [snap["id"]]
    for node in ("n1", "n2"):  # every staged image dropped
        assert not list((node_storage(cluster, node) / "workspaces").rglob("*.restore-*"))


def test_a_node_failing_to_swap_its_images_in_is_named_and_a_rerun_completes_it(
    plane: Plane, cluster: Cluster, tmp_path: Path
) -> None:
    """Phase 2 is not atomic across machines: n1 swaps its image in, then n2 cannot (its
    session's call holds it past the wait). The restore exits 3 naming both, leaves the data
    dir as it was, and the same restore run again once the call ended completes it."""
    on: dict[str, dict[str, Any]] = {}
    while len(on) < 2:
        made = node_session(plane)
        on.setdefault(made["node"], made)
    a, b = on["n1"]["id"], on["n2"]["id"]
    for s in (a, b):
        put(plane, s, "kept.txt", b"as in the backup")
    backup = tmp_path / "backup"
    done = navi_cli(cluster, "backup", str(backup), "--json", "--data-dir",
                    str(plane.server.data_dir))
    assert done.returncode == 0, done.stderr[-3000:]
    for s in (a, b):
        put(plane, s, "kept.txt", b"changed after the backup")
    manifest = json.loads((backup / "backup.json").read_text())
    manifest["disks"]["disks"] = sorted(
        [d for d in manifest["disks"]["disks"] if d["session"] in (a, b)],
        key=lambda d: d["node"])  # n1 swaps first
    (backup / "backup.json").write_text(json.dumps(manifest))
    target = tmp_path / "target"
    target.mkdir()
    (target / "navi.sqlite3").write_bytes(b"the store before the restore")
    before = tree(target)
    call = threading.Thread(target=plane.run, args=(
        b, "open('started', 'w').close(); import time; time.sleep(40)", 120))
    call.start()
    try:
        with client(plane) as c:
            deadline = time.monotonic() + 60
            while c.get(f"/v1/sessions/{b}/files/started").status_code != 200:
                assert time.monotonic() < deadline, "the call did not start"
                time.sleep(0.3)
        done = navi_cli(cluster, "restore", str(backup), "--force", "--data-dir", str(target))
        assert done.returncode == 3, (done.stdout[-2000:], done.stderr[-3000:])
        assert "node n2 failed" in done.stderr and "nodes that did: n1" in done.stderr, \
            done.stderr
        assert tree(target) == before
        assert read(plane, a, "kept.txt") == b"as in the backup"  # n1's swap stays
        assert read(plane, b, "kept.txt") == b"changed after the backup"
    finally:
        call.join(timeout=120)
    done = navi_cli(cluster, "restore", str(backup), "--force", "--data-dir", str(target))
    assert done.returncode == 0, done.stderr[-3000:]
    for s in (a, b):
        assert read(plane, s, "kept.txt") == b"as in the backup"
    assert (target / "navi.sqlite3").read_bytes() != b"the store before the restore"
    for node in ("n1", "n2"):
        assert not list((node_storage(cluster, node) / "workspaces").rglob("*.restore-*"))
