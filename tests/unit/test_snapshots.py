"""Session snapshots (runtime.workspace.snapshots) with real loop mounts: a restore gives back
exactly the snapshot's tree (later files gone, deleted ones back, modes and bytes), never
while a lease is out; a fork's copy is independent; snapshots count in the tenant's quota,
are refused past it with nothing left, survive a crash's leftovers, and go with their
session."""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.errors import Conflict, DiskFull, DiskQuotaExceeded, NotFound, SessionBusy
from runtime.workspace import Workspaces
from runtime.workspace.activity import Activity
from runtime.workspace.disk import SessionDisks, loop_mounts_available
from runtime.workspace.image_copy import image_lock, snapshots_dir
from runtime.workspace.mount_table import mounts_under
from runtime.workspace.snapshot_layout import snapshot_bytes
from runtime.workspace.snapshots import Snapshots, room_for

pytestmark = pytest.mark.skipif(not loop_mounts_available(), reason="needs root and loop devices")

MiB = 1024 * 1024
SIZE = 32 * MiB
TENANT = "t_00000000000000c1"
S1, S2 = "s_00000000000000a1", "s_00000000000000a2"


@pytest.fixture
def spaces(tmp_path: Path) -> Iterator[Workspaces]:
    root = tmp_path / "workspaces"
    ws = Workspaces(root, disks=SessionDisks(root, reserve_bytes=0), activity=Activity())
    for session in (S1, S2):
        ws.create(TENANT, session, uid=200000, disk_bytes=SIZE, tenant_disk_bytes=2**40)
    yield ws
    ws.close()
    assert mounts_under(root) == []


@contextlib.contextmanager
def free(need: int) -> Iterator[None]:
    yield


def tree(spaces: Workspaces, session: str) -> dict[str, tuple[int, str]]:
    """Every path under the session's workspace and tmp: (mode, sha256 of a file's bytes)."""
    with spaces.open(TENANT, session):
        top = spaces.session_dir(TENANT, session)
        found: dict[str, tuple[int, str]] = {}
        for where, dirs, files in os.walk(top):
            for name in dirs + files:
                path = Path(where, name)
                st = path.lstat()
                digest = hashlib.sha256(path.read_bytes()).hexdigest() if name in files else ""
                found[str(path.relative_to(top))] = (st.st_mode, digest)
        return found


def test_restore_gives_back_exactly_the_snapshot(spaces: Workspaces) -> None:
    snaps = Snapshots(spaces)
    with spaces.open(TENANT, S1) as ws:
        ws.write_bytes("keep.txt", b"v1")
        ws.write_bytes("dir/gone-later.bin", os.urandom(300_000))
        ws.write_bytes("dir/deleted.txt", b"back")
    os.chmod(spaces.path(TENANT, S1) / "keep.txt", 0o600)
    before = tree(spaces, S1)
    snap = snaps.create(TENANT, S1, "first", admit=free)
    assert snap.name == "first" and snap.bytes > 300_000
    assert snaps.list(TENANT, S1) == [snap]
    with spaces.open(TENANT, S1) as ws:
        ws.write_bytes("keep.txt", b"v2")
        ws.delete("dir/deleted.txt")
        ws.write_bytes("new.txt", b"later")
    os.chmod(spaces.path(TENANT, S1) / "keep.txt", 0o644)
    assert tree(spaces, S1) != before
    snaps.restore(TENANT, S1, snap.id, admit=free)
    assert spaces.state(TENANT, S1) == "idle"  # unmounted: the next use mounts the copy
    assert tree(spaces, S1) == before
    with spaces.open(TENANT, S1) as ws:
        assert ws.read_bytes("keep.txt") == b"v1" and ws.own_disk
    assert snaps.list(TENANT, S1) == [snap]  # a restore keeps the snapshot


def test_restore_refused_while_a_lease_is_out(spaces: Workspaces) -> None:
    snaps = Snapshots(spaces)
    snap = snaps.create(TENANT, S1, None, admit=free)
    with spaces.open(TENANT, S1) as ws:
        ws.write_bytes("during.txt", b"x")
        with pytest.raises(SessionBusy):
            snaps.restore(TENANT, S1, snap.id, admit=free)
        assert ws.read_bytes("during.txt") == b"x"
    snaps.restore(TENANT, S1, snap.id, admit=free)
    with spaces.open(TENANT, S1) as ws, pytest.raises(NotFound):
        ws.read_bytes("during.txt")


def test_fork_copy_is_independent(spaces: Workspaces) -> None:
    snaps = Snapshots(spaces)
    with spaces.open(TENANT, S1) as ws:
        ws.write_bytes("a.txt", b"from snapshot")
    snap = snaps.create(TENANT, S1, None, admit=free)
    with spaces.open(TENANT, S1) as ws:
        ws.write_bytes("a.txt", b"live")
    snaps.copy_into(TENANT, S1, snap.id, S2)
    with spaces.open(TENANT, S2) as ws:
        assert ws.read_bytes("a.txt") == b"from snapshot"
        ws.write_bytes("a.txt", b"fork's own")
    snaps.copy_into(TENANT, S1, None, S2)  # the live disk this time
    assert tree(spaces, S2) == tree(spaces, S1)
    with spaces.open(TENANT, S2) as ws:
        ws.write_bytes("b.txt", b"only in the fork")
    with spaces.open(TENANT, S1) as ws:
        assert ws.read_bytes("a.txt") == b"live"
        with pytest.raises(NotFound):
            ws.read_bytes("b.txt")


def test_snapshots_count_in_the_quota_and_are_refused_past_it(spaces: Workspaces) -> None:
    snaps = Snapshots(spaces)
    with spaces.open(TENANT, S1) as ws:
        ws.write_bytes("big.bin", os.urandom(4 * MiB))
    tenant_dir = spaces.root / TENANT
    counted = spaces.disks.tenant_allocated(tenant_dir, idle=True)
    snap = snaps.create(TENANT, S1, None, admit=free)
    assert snap.bytes >= 4 * MiB
    assert snap.bytes <= snapshot_bytes(tenant_dir) <= snap.bytes + 8192  # + its metadata
    assert spaces.disks.tenant_allocated(tenant_dir, idle=True) >= counted + snap.bytes
    # not room for another, even with every session idle (else 429: DiskQuotaBusy)
    limit = spaces.disks.tenant_allocated(tenant_dir, idle=True) + 2 * MiB

    def admit(need: int) -> contextlib.AbstractContextManager[None]:
        return spaces.admitting(TENANT, need, 0, limit)

    with pytest.raises(DiskQuotaExceeded):
        snaps.create(TENANT, S1, None, admit=admit)
    assert snaps.list(TENANT, S1) == [snap]
    assert sorted(p.name for p in snapshots_dir(spaces.session_dir(TENANT, S1)).iterdir()) \
        == [f"{snap.id}.img", f"{snap.id}.json"]


def test_delete_leftovers_and_removal_with_the_session(spaces: Workspaces) -> None:
    snaps = Snapshots(spaces)
    one = snaps.create(TENANT, S1, "one", admit=free)
    folder = snapshots_dir(spaces.session_dir(TENANT, S1))
    (folder / "sn_00000000000000ff.img").write_bytes(b"crash before its metadata")
    (folder / "sn_00000000000000fe.img.part").write_bytes(b"crash mid-copy")
    assert snaps.list(TENANT, S1) == [one]
    two = snaps.create(TENANT, S1, "two", admit=free)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        f"{s.id}.{ext}" for s in (one, two) for ext in ("img", "json"))
    snaps.delete(TENANT, S1, one.id)
    assert snaps.list(TENANT, S1) == [two]
    for bad in (one.id, "../s_00000000000000a2", "sn_nope"):
        with pytest.raises(NotFound):
            snaps.restore(TENANT, S1, bad, admit=free)
    with pytest.raises(NotFound):  # another session's snapshot is not this one's
        snaps.get(TENANT, S2, two.id)
    # a crash mid-restore leaves the new image's part beside the session's
    (spaces.root / TENANT / f"{S1}.img.part").write_bytes(b"crash mid-restore")
    spaces.remove(TENANT, S1)
    assert not folder.exists() and snapshot_bytes(spaces.root / TENANT) == 0
    assert [p.name for p in (spaces.root / TENANT).iterdir() if p.name.startswith(S1)] == []


def test_a_snapshot_deleted_while_a_restore_waits_is_not_found(spaces: Workspaces) -> None:
    """The delete holds the image lock first: the restore behind it finds no snapshot (404),
    not a missing file (500)."""
    snaps = Snapshots(spaces)
    snap = snaps.create(TENANT, S1, None, admit=free)
    folder = snapshots_dir(spaces.session_dir(TENANT, S1))
    errors: list[BaseException] = []

    def restore() -> None:
        try:
            snaps.restore(TENANT, S1, snap.id, admit=free)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors.append(exc)

    with image_lock(spaces.session_dir(TENANT, S1)):
        waiting = threading.Thread(target=restore)
        waiting.start()
        time.sleep(0.3)
        for ext in ("json", "img"):  # what a delete does under the lock
            (folder / f"{snap.id}.{ext}").unlink()
    waiting.join(10)
    assert len(errors) == 1 and isinstance(errors[0], NotFound), errors


def test_restore_is_admitted_against_the_quota_for_what_it_adds(spaces: Workspaces) -> None:
    """Restoring a bigger snapshot grows the session's image: that growth is admitted like a
    snapshot's copy, and a refusal leaves the session as it was (no quota bypass)."""
    snaps = Snapshots(spaces)
    empty = snaps.create(TENANT, S1, "empty", admit=free)
    with spaces.open(TENANT, S1) as ws:
        ws.write_bytes("big.bin", os.urandom(3 * MiB))
    full = snaps.create(TENANT, S1, "full", admit=free)
    snaps.restore(TENANT, S1, empty.id, admit=free)
    asked: list[int] = []

    @contextlib.contextmanager
    def refuse(need: int) -> Iterator[None]:
        asked.append(need)
        raise DiskQuotaExceeded("no room")
        yield

    with pytest.raises(DiskQuotaExceeded):
        snaps.restore(TENANT, S1, full.id, admit=refuse)
    assert len(asked) == 1 and asked[0] >= 3 * MiB
    with spaces.open(TENANT, S1) as ws, pytest.raises(NotFound):
        ws.read_bytes("big.bin")  # still the empty one
    snaps.restore(TENANT, S1, full.id, admit=free)
    with spaces.open(TENANT, S1) as ws:
        assert len(ws.read_bytes("big.bin")) == 3 * MiB


def test_a_session_deleted_under_a_snapshot_is_not_found(spaces: Workspaces) -> None:
    """The session goes while its snapshot waits for the quota: 404, not a missing image
    (500), and no snapshot directory left behind."""
    snaps = Snapshots(spaces)

    @contextlib.contextmanager
    def deleted_meanwhile(need: int) -> Iterator[None]:
        spaces.remove(TENANT, S1)
        yield

    with pytest.raises(NotFound):
        snaps.create(TENANT, S1, None, admit=deleted_meanwhile)
    assert [p.name for p in (spaces.root / TENANT).iterdir() if p.name.startswith(S1)] == []


def test_fork_without_session_disks_is_a_conflict(tmp_path: Path) -> None:
    root = tmp_path / "workspaces"
    spaces = Workspaces(root, disks=SessionDisks(root, enabled=False), activity=Activity())
    for session in (S1, S2):
        spaces.create(TENANT, session, uid=200000)
    with pytest.raises(Conflict):
        Snapshots(spaces).copy_into(TENANT, S1, None, S2)


def test_snapshots_are_admitted_on_the_data_disk_too(tmp_path: Path) -> None:
    """On a data disk of its own (a 100 MiB tmpfs, so other jobs' files do not move its free
    space) with a 40 MiB reserve: a copy that would eat into the reserve or into what the
    mounted 32 MiB disk may still grow by is DiskFull, whatever the tenant's quota."""
    root = tmp_path / "workspaces"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=100M", "snapdisk", str(root)],
                   check=True)
    spaces = Workspaces(root, disks=SessionDisks(root, reserve_bytes=40 * MiB),
                        activity=Activity())
    try:
        spaces.create(TENANT, S1, uid=200000, disk_bytes=SIZE, tenant_disk_bytes=2**40)
        with spaces.open(TENANT, S1) as ws:
            ws.write_bytes("big.bin", os.urandom(16 * MiB))
        snaps, admit = Snapshots(spaces), room_for(spaces, TENANT, 2**40)
        # room: free (~83.5) - reserve (40) - growth left (~15.5) = ~28 MiB: one copy of ~16.5
        first = snaps.create(TENANT, S1, None, admit=admit)
        with spaces.open(TENANT, S1):  # in use: its growth stays promised
            with pytest.raises(DiskFull):
                snaps.create(TENANT, S1, None, admit=admit)
        assert snaps.list(TENANT, S1) == [first]
    finally:
        spaces.close()
        subprocess.run(["umount", str(root)], check=True)
