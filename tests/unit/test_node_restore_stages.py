"""A node agent's side of `navi restore` (`runtime.cluster.agent.restore.NodeRestores`), on a
real data dir (session disks off: an image is a plain file): phase 1 stages an image beside
its target once its digest is the manifest's and replaces nothing; phase 2 puts every staged
image of the restore in place, or drops them all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.backup_disks import sparse_sha256
from runtime.cluster.agent.restore import NodeRestores
from runtime.errors import InvalidInput, NotFound
from runtime.workspace.manager import Workspaces

T, S, SNAP = "t_0123456789abcdef", "s_0123456789abcdef", "sn_0123456789abcdef"
RESTORE = "0123456789abcdef"


def digest_of(tmp_path: Path, data: bytes) -> str:
    probe = tmp_path / "probe"
    probe.write_bytes(data)
    return sparse_sha256(probe)


def send(restores: NodeRestores, tmp_path: Path, data: bytes, *, snapshot: str | None = None,
         digest: str | None = None) -> None:
    want = {"tenant": T, "session": S, "restore": RESTORE,
            "sha256": digest or digest_of(tmp_path, data), "size": len(data),
            "kind": "snapshot" if snapshot else "session", "snapshot": snapshot,
            "name": "kept" if snapshot else None}
    handle = restores.open(json.dumps(want).encode())
    restores.write(handle, 0, data)
    restores.end(handle, True)


def finish(restores: NodeRestores, commit: bool) -> int:
    return restores.finish(json.dumps({"restore": RESTORE, "commit": commit}).encode())


@pytest.fixture
def node(tmp_path: Path) -> tuple[NodeRestores, Path]:
    spaces = Workspaces(tmp_path / "workspaces")
    session_dir = spaces.session_dir(T, S)
    session_dir.mkdir(parents=True)
    (session_dir.parent / f"{S}.img").write_bytes(b"the live disk")
    return NodeRestores(spaces), session_dir.parent


def parts(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if ".restore-" in p.name]


def test_a_staged_image_replaces_nothing_until_the_restore_commits(
    node: tuple[NodeRestores, Path], tmp_path: Path
) -> None:
    restores, tenant_dir = node
    send(restores, tmp_path, b"the backup's disk")
    send(restores, tmp_path, b"the backup's snapshot", snapshot=SNAP)
    assert (tenant_dir / f"{S}.img").read_bytes() == b"the live disk"
    assert not (tenant_dir / f"{S}.snapshots" / f"{SNAP}.img").exists()
    assert len(parts(tenant_dir)) == 2  # kept aside, beside their targets
    assert finish(restores, True) == 2
    assert (tenant_dir / f"{S}.img").read_bytes() == b"the backup's disk"
    snap = tenant_dir / f"{S}.snapshots"
    assert (snap / f"{SNAP}.img").read_bytes() == b"the backup's snapshot"
    assert json.loads((snap / f"{SNAP}.json").read_text())["name"] == "kept"
    assert parts(tenant_dir) == []


def test_a_discarded_restore_leaves_the_node_as_it_was(
    node: tuple[NodeRestores, Path], tmp_path: Path
) -> None:
    restores, tenant_dir = node
    send(restores, tmp_path, b"the backup's disk")
    send(restores, tmp_path, b"the backup's snapshot", snapshot=SNAP)
    assert finish(restores, False) == 2
    assert (tenant_dir / f"{S}.img").read_bytes() == b"the live disk"
    assert list((tenant_dir / f"{S}.snapshots").iterdir()) == []
    assert parts(tenant_dir) == []
    with pytest.raises(NotFound):  # nothing left to commit
        finish(restores, True)


def test_an_image_that_differs_from_the_manifest_is_refused_and_not_kept(
    node: tuple[NodeRestores, Path], tmp_path: Path
) -> None:
    restores, tenant_dir = node
    with pytest.raises(InvalidInput, match="digest"):
        send(restores, tmp_path, b"bytes changed on the way",
             digest=digest_of(tmp_path, b"the backup's disk"))
    assert parts(tenant_dir) == []
    assert finish(restores, False) == 0
    assert (tenant_dir / f"{S}.img").read_bytes() == b"the live disk"


def test_a_commit_the_agent_has_nothing_staged_for_is_not_found(
    node: tuple[NodeRestores, Path],
) -> None:
    restores, _ = node
    with pytest.raises(NotFound):  # e.g. the agent restarted between the phases
        finish(restores, True)


def test_a_new_agent_deletes_the_parts_an_earlier_one_staged(
    node: tuple[NodeRestores, Path], tmp_path: Path
) -> None:
    restores, tenant_dir = node
    send(restores, tmp_path, b"the backup's disk")
    send(restores, tmp_path, b"the backup's snapshot", snapshot=SNAP)
    assert len(parts(tenant_dir)) == 2
    NodeRestores(restores.workspaces)  # the agent process started again
    assert parts(tenant_dir) == []
    assert (tenant_dir / f"{S}.img").read_bytes() == b"the live disk"
