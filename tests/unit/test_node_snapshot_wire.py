"""What a node agent takes for snapshots and what `navi backup` takes from a node: ids only,
checked; nothing a node streams places a file outside its session's place in the backup."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.backup_disks import backup_disks
from runtime.backup_nodes import write_images
from runtime.errors import InvalidInput, NodeUnavailable
from runtime.nodes.snapshot_wire import RestoreFinish, RestoreImage, SnapshotOp
from runtime.nodes.wire import parsed
from runtime.workspace.image_copy import image_of

T, S, SNAP = "t_0123456789abcdef", "s_0123456789abcdef", "sn_0123456789abcdef"


def op(**fields: object) -> bytes:
    return json.dumps({"tenant": T, "session": S, **fields}).encode()


def test_a_well_formed_request_parses() -> None:
    got = parsed(SnapshotOp, op(op="restore", snapshot=SNAP, limit=1 << 30))
    assert (got.op, got.snapshot, got.limit) == ("restore", SNAP, 1 << 30)


@pytest.mark.parametrize("fields", [
    {"op": "get", "snapshot": "../../etc/passwd"},
    {"op": "get", "snapshot": "sn_0123456789abcdef/../x"},
    {"op": "delete"},
    {"op": "restore", "snapshot": SNAP},  # without the tenant's limit
    {"op": "fork", "target": "../other"},
    {"op": "fork", "target": S},
    {"op": "list", "path": "/etc"},
    {"op": "mount"},
], ids=lambda f: "-".join(f"{k}={v}" for k, v in f.items()))
def test_a_path_or_an_incomplete_request_is_refused(fields: dict[str, object]) -> None:
    with pytest.raises(InvalidInput):
        parsed(SnapshotOp, op(**fields))


def test_a_session_id_with_a_path_is_refused() -> None:
    with pytest.raises(InvalidInput):
        parsed(SnapshotOp, json.dumps({"tenant": T, "session": "../x", "op": "list"}))


def test_a_streamed_image_is_written_sparse_where_its_ids_place_it(tmp_path: Path) -> None:
    session_dir = tmp_path / "workspaces" / T / S
    session_dir.parent.mkdir(parents=True)
    meta = {"id": SNAP, "name": None, "created_at": 1.0, "bytes": 4096}
    items = [("image", {"kind": "session", "name": "/etc/passwd", "size": 1 << 30}),
             ("data", (4096, b"abc")),
             ("image", {"kind": "snapshot", "name": f"x/{SNAP}.img", "size": 8192,
                        "meta": meta}),
             ("data", (0, b"z"))]
    copied = write_images(iter(items), session_dir)
    assert copied is not None
    session_image = tmp_path / "workspaces" / T / f"{S}.img"
    assert [(k, p) for k, p, _s, _m in copied] == [
        ("session", session_image),
        ("snapshot", tmp_path / "workspaces" / T / f"{S}.snapshots" / f"{SNAP}.img")]
    assert session_image.stat().st_size == 1 << 30
    assert session_image.stat().st_blocks * 512 < 1 << 20  # holes stay holes
    with open(session_image, "rb") as fh:
        fh.seek(4096)
        assert fh.read(3) == b"abc"


@pytest.mark.parametrize("items", [
    [("image", {"kind": "snapshot", "name": "../../evil.img", "size": 1,
                "meta": {"id": "../../evil"}})],
    [("image", {"kind": "session", "size": 10}), ("data", (8, b"too long"))],
    [("data", (0, b"before any image"))],
    [("image", {"kind": "other", "name": "x", "size": 1})],
], ids=["snapshot-path", "past-the-end", "no-image", "unknown-kind"])
def test_what_a_node_streams_cannot_place_bytes_elsewhere(
    tmp_path: Path, items: list[tuple[str, object]]
) -> None:
    session_dir = tmp_path / "workspaces" / T / S
    session_dir.parent.mkdir(parents=True)
    with pytest.raises(ValueError):
        write_images(iter(items), session_dir)
    assert not (tmp_path / "evil.img").exists()


class _DownNode:
    """A cluster whose node went down in the middle of sending a session's disk."""

    def fetch(self, node_id: str, tenant: str, session: str, session_dir: Path, *,
              snapshots: bool) -> None:
        image_of(session_dir).write_bytes(b"half an image")
        raise NodeUnavailable(node_id)


def test_a_node_that_is_down_holds_back_its_sessions_not_the_backup(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    report = backup_disks(tmp_path / "data", work, [(T, S, "n2")], nodes=_DownNode())
    assert [(k.session, k.reason) for k in report.skipped] == [(S, "node_unavailable")]
    assert report.disks == []
    assert list((work / "workspaces" / T).iterdir()) == []  # no half image left


def test_without_the_cluster_a_node_session_is_listed_as_not_copied(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    report = backup_disks(tmp_path / "data", work, [(T, S, "n2")])
    assert [(k.session, k.reason) for k in report.skipped] == [(S, "other_node")]


RESTORE, DIGEST = "0123456789abcdef", "ab" * 32


def restore_op(**fields: object) -> bytes:
    return op(restore=RESTORE, sha256=DIGEST, **fields)


def test_a_well_formed_restore_image_parses() -> None:
    got = parsed(RestoreImage, restore_op(kind="snapshot", size=4096, snapshot=SNAP))
    assert (got.restore, got.sha256, got.snapshot) == (RESTORE, DIGEST, SNAP)


@pytest.mark.parametrize("fields", [
    {"kind": "snapshot", "size": 1},  # no snapshot id
    {"kind": "session", "size": 1, "snapshot": SNAP},
    {"kind": "snapshot", "size": 1, "snapshot": "../sn_0123456789abcdef"},
    {"kind": "session", "size": -1},
    {"kind": "session", "size": 1, "path": "/etc/shadow"},
    {"kind": "session", "size": 1, "target": "/var/lib/navi-node/workspaces/x.img"},
], ids=["snapshot-unnamed", "disk-named", "snapshot-path", "negative", "a-path", "a-target"])
def test_a_restore_names_its_image_by_ids_only(fields: dict[str, object]) -> None:
    with pytest.raises(InvalidInput):
        parsed(RestoreImage, restore_op(**fields))


@pytest.mark.parametrize("fields", [
    {"restore": "../../etc"},
    {"restore": "0123456789ABCDEF"},
    {"sha256": "ab" * 31},
    {"sha256": None},
], ids=["restore-path", "restore-upper", "digest-short", "digest-missing"])
def test_a_restore_image_carries_its_restore_and_the_manifest_digest(
    fields: dict[str, object]
) -> None:
    body = {"tenant": T, "session": S, "kind": "session", "size": 1, "restore": RESTORE,
            "sha256": DIGEST, **fields}
    with pytest.raises(InvalidInput):
        parsed(RestoreImage, json.dumps({k: v for k, v in body.items() if v is not None}))


def test_a_restore_finish_parses() -> None:
    got = parsed(RestoreFinish, json.dumps({"restore": RESTORE, "commit": True}))
    assert (got.restore, got.commit) == (RESTORE, True)


@pytest.mark.parametrize("body", [
    {"restore": RESTORE},  # commit or discard: said, never assumed
    {"restore": RESTORE, "commit": "yes"},
    {"restore": RESTORE, "commit": 1},
    {"restore": "../x", "commit": True},
    {"restore": RESTORE, "commit": True, "path": "/var/lib/navi-node"},
    {"restore": RESTORE, "commit": True, "tenant": T},
], ids=["no-commit", "commit-str", "commit-int", "restore-path", "a-path", "unknown-field"])
def test_a_restore_finish_takes_a_restore_id_and_a_bool_only(body: dict[str, object]) -> None:
    with pytest.raises(InvalidInput):
        parsed(RestoreFinish, json.dumps(body))
