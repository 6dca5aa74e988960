"""Consistent sparse copies of session images (runtime.workspace.image_copy), with real loop
mounts: a copy of a mounted, just-written disk holds what was written (the freeze flushed
it), holes stay holes, the lock is exclusive across open files (as across processes), and
the cost of a 100 MiB session's copy is measured."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from runtime.workspace.disk import SessionDisks, loop_mounts_available
from runtime.workspace.image_copy import FIFREEZE, copy_image, image_lock, image_of
from runtime.workspace.mount_table import FITHAW, release

pytestmark = pytest.mark.skipif(not loop_mounts_available(), reason="needs root and loop devices")

MiB = 1024 * 1024



def read_copy(disks: SessionDisks, copy: Path, name: str) -> bytes:
    """Mount ``copy`` read-only elsewhere and read ``name`` from it."""
    point = disks.root / "check"
    point.mkdir()
    subprocess.run(["mount", "-o", "loop,ro,noload", str(copy), str(point)], check=True)
    try:
        return (point / name).read_bytes()
    finally:
        subprocess.run(["umount", str(point)], check=True)
        point.rmdir()


def test_copy_of_a_mounted_disk_holds_what_was_just_written(disks: SessionDisks) -> None:
    session = disks.root / "t" / "s1"
    disks.create(session, 64 * MiB)
    data = os.urandom(3 * MiB)
    (session / "f.bin").write_bytes(data)  # dirty in the page cache, not yet in the image
    stats = copy_image(session, disks.root / "copy.img")
    assert stats.size == 64 * MiB
    assert stats.allocated < 16 * MiB  # sparse: about what the disk holds
    assert os.stat(disks.root / "copy.img").st_blocks * 512 == stats.allocated
    # noload: no journal replay, so the copy must be clean on its own (the freeze made it so)
    assert read_copy(disks, disks.root / "copy.img", "f.bin") == data
    (session / "f.bin").write_bytes(b"after")  # thawed: the disk takes writes again
    assert (session / "f.bin").read_bytes() == b"after"
    assert not list(disks.root.glob("*.part"))


def test_image_lock_excludes_another_holder(disks: SessionDisks) -> None:
    session = disks.root / "t" / "s2"
    disks.create(session, 32 * MiB)
    order: list[str] = []
    with image_lock(session):
        def other() -> None:
            with image_lock(session):
                order.append("other")
        thread = threading.Thread(target=other)
        thread.start()
        time.sleep(0.2)
        order.append("first")
    thread.join(5)
    assert order == ["first", "other"]


def test_copy_without_image_is_file_not_found(disks: SessionDisks) -> None:
    with pytest.raises(FileNotFoundError):
        copy_image(disks.root / "t" / "gone", disks.root / "x.img")
    assert not (disks.root / "t" / "gone.snapshots").exists()


def test_measure_100_mib(disks: SessionDisks, capsys: pytest.CaptureFixture[str]) -> None:
    session = disks.root / "t" / "s3"
    disks.create(session, 1024 * MiB)
    empty = copy_image(session, disks.root / "empty.img")
    with open(session / "data.bin", "wb") as fh:
        for _ in range(100):
            fh.write(os.urandom(MiB))
    full = copy_image(session, disks.root / "full.img")
    image = os.stat(image_of(session)).st_blocks * 512
    with capsys.disabled():
        print(f"\nsnapshot of an empty 1 GiB session: {empty.ms:.1f} ms, "
              f"{empty.allocated / MiB:.2f} MiB; holding 100 MiB: {full.ms:.1f} ms, "
              f"{full.allocated / MiB:.2f} MiB (image {image / MiB:.2f} MiB)")
    assert full.allocated >= 100 * MiB and full.allocated <= image


def test_a_release_thaws_a_disk_left_frozen(disks: SessionDisks) -> None:
    """A supervisor killed mid-copy leaves its session's filesystem frozen: the release (by
    the mount guard, start-up reconcile or unmount) thaws it, else its writers hang."""
    session = disks.root / "t" / "s4"
    disks.create(session, 32 * MiB)
    point_fd = os.open(session, os.O_RDONLY | os.O_DIRECTORY)
    file_fd = os.open(session / "f", os.O_WRONLY | os.O_CREAT, 0o600)
    wrote = threading.Event()

    def write() -> None:
        os.write(file_fd, b"x")
        os.fsync(file_fd)
        wrote.set()

    try:
        fcntl.ioctl(point_fd, FIFREEZE, 0)
        assert release(str(session))
        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        assert wrote.wait(5), "the released filesystem stayed frozen"
    finally:
        with contextlib.suppress(OSError):
            fcntl.ioctl(point_fd, FITHAW, 0)
        os.close(file_fd)
        os.close(point_fd)
        disks.remove(session)


def test_the_lock_leaves_no_directory_for_a_session_without_image(tmp_path: Path) -> None:
    """Whoever waited for the lock while the session was removed (snapshot, restore, mount,
    release) made its directory again: it goes when the lock ends; with an image it stays."""
    gone, kept = tmp_path / "s_00000000000000d1", tmp_path / "s_00000000000000d2"
    image_of(kept).write_bytes(b"")
    for session_dir in (gone, kept):
        with image_lock(session_dir):
            assert (tmp_path / f"{session_dir.name}.snapshots").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"{kept.name}.img", f"{kept.name}.snapshots"]
