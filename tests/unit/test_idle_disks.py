"""Session disks are mounted while in use and released when idle (runtime.workspace.activity),
with real loop mounts: leases, the race with a call arriving as its session is released, the
tenant's quota counting idle sessions at the bytes they hold, and exclusive holds."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from runtime.errors import DiskFull, DiskQuotaBusy, DiskQuotaExceeded, SessionBusy
from runtime.workspace import Workspaces
from runtime.workspace.activity import Activity
from runtime.workspace.disk import SessionDisks, loop_mounts_available
from runtime.workspace.mount_table import mounts_under

pytestmark = pytest.mark.skipif(not loop_mounts_available(), reason="needs root and loop devices")

MiB = 1024 * 1024
SIZE = 32 * MiB
TENANT = "t_00000000000000b1"


def sid(n: int) -> str:
    return f"s_{n:016x}"


class Drops:
    """The workspaces' ``drop_containers`` (given at construction): what a test wants done
    when a session's warm containers are dropped (nothing by default)."""

    def __init__(self) -> None:
        self.then: Callable[[str], object] = lambda session_id: None

    def __call__(self, session_id: str) -> None:
        self.then(session_id)


@pytest.fixture
def drops() -> Drops:
    return Drops()


@pytest.fixture
def spaces(tmp_path: Path, drops: Drops) -> Iterator[Workspaces]:
    root = tmp_path / "workspaces"
    ws = Workspaces(root, disks=SessionDisks(root, reserve_bytes=0),
                    activity=Activity(idle_s=0.05), drop_containers=drops)
    yield ws
    ws.close()
    assert mounts_under(root) == []


def loops(image: Path) -> str:
    """The loop devices backed by ``image``."""
    return subprocess.run(["losetup", "-j", str(image)], capture_output=True, text=True,
                          check=True).stdout


def mounted(spaces: Workspaces) -> set[str]:
    return {Path(p).name for p in mounts_under(spaces.root)}


def make(spaces: Workspaces, n: int, limit: int = 2**40) -> str:
    spaces.create(TENANT, sid(n), uid=200000, disk_bytes=SIZE, tenant_disk_bytes=limit)
    return sid(n)


def test_idle_disk_is_released_and_mounted_again_on_use(spaces: Workspaces) -> None:
    s = make(spaces, 1)
    with spaces.open(TENANT, s) as ws:
        ws.write_bytes("f", b"kept")
    assert spaces.state(TENANT, s) == "active" and s in mounted(spaces)
    time.sleep(0.1)
    image = spaces.disks.image(spaces.session_dir(TENANT, s))
    assert loops(image)
    assert spaces.release(TENANT, s)
    assert spaces.state(TENANT, s) == "idle" and s not in mounted(spaces)
    deadline = time.monotonic() + 5
    while loops(image) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert loops(image) == ""  # the loop device went with the mount
    with spaces.open(TENANT, s) as ws:
        assert ws.read_bytes("f") == b"kept"
    assert spaces.state(TENANT, s) == "active" and s in mounted(spaces)


def test_never_released_while_a_workspace_is_open(spaces: Workspaces) -> None:
    s = make(spaces, 1)
    ws = spaces.open(TENANT, s)
    time.sleep(0.1)
    assert not spaces.release(TENANT, s, only_idle=False)
    assert s in mounted(spaces)
    ws.close()
    assert not spaces.release(TENANT, s)  # just used: not idle yet
    time.sleep(0.1)
    assert spaces.release(TENANT, s)


def test_a_call_arriving_while_its_session_is_released(spaces: Workspaces,
                                                       drops: Drops) -> None:
    """The open comes while the release drops the warm containers: the release gives up
    (the lease came first), the call's workspace is on the session's own disk."""
    s = make(spaces, 1)
    dropping, opened = threading.Event(), threading.Event()

    def drop(session_id: str) -> None:
        dropping.set()
        assert opened.wait(5)

    drops.then = drop
    time.sleep(0.1)
    released: list[bool] = []
    releaser = threading.Thread(target=lambda: released.append(spaces.release(TENANT, s)))
    releaser.start()
    assert dropping.wait(5)
    ws = spaces.open(TENANT, s)
    opened.set()
    releaser.join(5)
    try:
        assert released == [False]
        assert s in mounted(spaces) and spaces.state(TENANT, s) == "active"
        ws.write_bytes("during", b"x")
        assert ws.own_disk
    finally:
        ws.close()


def test_an_open_behind_a_release_mounts_again(spaces: Workspaces) -> None:
    """The open comes after the release checked the leases: it waits at the gate and mounts
    the disk again, and sees the session's files."""
    s = make(spaces, 1)
    with spaces.open(TENANT, s) as ws:
        ws.write_bytes("f", b"kept")
    time.sleep(0.1)
    gate = spaces.activity.gate((TENANT, s))
    gate.acquire()
    opened: list[bytes] = []
    opener = threading.Thread(
        target=lambda: opened.append(spaces.open(TENANT, s).read_bytes("f")))
    try:
        assert spaces.activity.retire((TENANT, s))  # what a release does under the gate
        spaces.disks.unmount(spaces.session_dir(TENANT, s))
        opener.start()
        time.sleep(0.2)
        assert opened == []  # waiting for the gate
    finally:
        gate.release()
    opener.join(5)
    assert opened == [b"kept"] and s in mounted(spaces)


def test_quota_counts_idle_sessions_at_their_bytes(spaces: Workspaces) -> None:
    limit = 3 * SIZE + 4 * MiB  # three active ones and what idle ones hold (< 1 MiB each)
    for n in range(1, 4):
        make(spaces, n, limit)
    # a 4th fits: the least recently used of the three is released first
    with spaces.open(TENANT, sid(2)), spaces.open(TENANT, sid(3)):
        pass
    make(spaces, 4, limit)
    assert spaces.state(TENANT, sid(1)) == "idle" and sid(1) not in mounted(spaces)
    assert {spaces.state(TENANT, sid(n)) for n in (2, 3, 4)} == {"active"}
    # ten sessions of a third of the quota each: idle ones cost what they hold
    for n in range(5, 11):
        make(spaces, n, limit)
    assert 2 <= len(mounted(spaces)) <= 3
    tenant_dir = spaces.root / TENANT
    assert spaces.disks.tenant_allocated(tenant_dir) <= limit
    assert spaces.disks.tenant_allocated(tenant_dir, idle=True) < 10 * MiB


def test_429_when_every_active_session_is_in_use(spaces: Workspaces) -> None:
    limit = 2 * SIZE
    held = [spaces.open(TENANT, make(spaces, n, limit)) for n in (1, 2)]
    try:
        with pytest.raises(DiskQuotaBusy) as info:
            make(spaces, 3, limit)
        assert info.value.retry_after > 0 and info.value.code == "disk_quota"
    finally:
        for ws in held:
            ws.close()
    make(spaces, 3, limit)


def test_413_when_the_idle_sessions_hold_the_quota(spaces: Workspaces) -> None:
    limit = 2 * SIZE
    for n in (1, 2):
        make(spaces, n, limit)
        with spaces.open(TENANT, sid(n)) as ws:
            ws.write_bytes("big", os.urandom(24 * MiB))
    time.sleep(0.1)
    for n in (1, 2):
        assert spaces.release(TENANT, sid(n))
    with pytest.raises(DiskQuotaExceeded):
        make(spaces, 3, limit)
    assert spaces.disks.tenant_allocated(spaces.root / TENANT) <= limit
    with spaces.open(TENANT, sid(1)) as ws:  # its size and what the other one holds fit
        assert len(ws.read_bytes("big")) == 24 * MiB


def test_data_disk_admission_counts_only_mounted_disks(tmp_path: Path) -> None:
    """On a data disk of its own (a 100 MiB tmpfs, so other jobs' files do not move its free
    space): room for what one mounted 32 MiB disk may grow by beside the reserve, not two."""
    root = tmp_path / "workspaces"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=100M", "bench", str(root)], check=True)
    spaces = Workspaces(root, disks=SessionDisks(root, reserve_bytes=40 * MiB),
                        activity=Activity(idle_s=0.05))
    try:
        make(spaces, 1)
        make(spaces, 2)  # the first is released to make room on the data disk
        assert mounted(spaces) - {"workspaces"} == {sid(2)}  # (the tmpfs itself)
        with spaces.open(TENANT, sid(2)), pytest.raises(DiskFull):
            make(spaces, 3)  # the one active session is in use: nothing to release
    finally:
        spaces.close()
        subprocess.run(["umount", str(root)], check=True)


def test_exclusive_waits_for_or_refuses_uses_in_flight(spaces: Workspaces) -> None:
    s = make(spaces, 1)
    ws = spaces.open(TENANT, s)
    with pytest.raises(SessionBusy), spaces.exclusive(TENANT, s):
        pass
    ws.close()
    opened: list[float] = []
    with spaces.exclusive(TENANT, s):
        opener = threading.Thread(
            target=lambda: (spaces.open(TENANT, s).close(), opened.append(time.monotonic())))
        opener.start()
        time.sleep(0.2)
        assert opened == []  # new uses wait until the hold ends
        assert not spaces.release(TENANT, s, only_idle=False)
        ended = time.monotonic()
    opener.join(5)
    assert opened and opened[0] >= ended


def test_offline_releases_the_disk_and_holds_uses_back(spaces: Workspaces,
                                                       drops: Drops) -> None:
    s = make(spaces, 1)
    dropped: list[str] = []
    drops.then = dropped.append
    with spaces.open(TENANT, s) as ws:
        ws.write_bytes("f", b"kept")
        with pytest.raises(SessionBusy), spaces.offline(TENANT, s):
            pass
    with spaces.offline(TENANT, s) as session_dir:
        assert dropped == [s] and s not in mounted(spaces)
        assert spaces.state(TENANT, s) == "idle"
        assert spaces.disks.image(session_dir).is_file()
    with spaces.open(TENANT, s) as ws:
        assert ws.read_bytes("f") == b"kept"
