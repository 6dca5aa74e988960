"""The workspace acts as the sandbox uid (``runtime.workspace.actas``): mode bits the sandbox
set bind the supervisor's root too, files it writes are the sandbox's, no link is followed,
and the thread is root again afterwards. Real files, real setfsuid (needs root)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from runtime.errors import InvalidPath, NotFound, PermissionDenied
from runtime.workspace import Workspace
from runtime.workspace.actas import acting_as, current_fsuid

UID = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="setfsuid to another uid needs root")


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    root.mkdir(mode=0o770)
    os.chown(root, UID, UID)
    os.chmod(tmp_path, 0o711)
    return Workspace.at(root, owner=(UID, UID), acting=(UID, UID))


def test_a_file_the_sandbox_made_unreadable_is_refused(ws: Workspace, tmp_path: Path) -> None:
    ws.write_bytes("secret.txt", b"x")
    os.chmod(tmp_path / "ws" / "secret.txt", 0)
    with pytest.raises(PermissionDenied) as info:
        ws.read_bytes("secret.txt")
    assert info.value.code == "permission_denied"
    with pytest.raises(PermissionDenied):
        ws.write_bytes("secret.txt", b"y")


def test_a_read_only_file_and_dir_are_not_written(ws: Workspace, tmp_path: Path) -> None:
    ws.write_bytes("d/locked.txt", b"keep")
    os.chmod(tmp_path / "ws" / "d" / "locked.txt", 0o444)
    with pytest.raises(PermissionDenied):
        ws.write_bytes("d/locked.txt", b"changed")  # an atomic rename would have replaced it
    assert ws.read_bytes("d/locked.txt") == b"keep"
    os.chmod(tmp_path / "ws" / "d", 0o555)
    for attempt in (lambda: ws.write_bytes("d/new.txt", b"n"), lambda: ws.delete("d/locked.txt"),
                    lambda: ws.mkdir("d/sub"), lambda: ws.move("d/locked.txt", "moved.txt")):
        with pytest.raises(PermissionDenied):
            attempt()
    assert sorted(os.listdir(tmp_path / "ws" / "d")) == ["locked.txt"]


def test_written_files_are_the_sandbox_uid_s(ws: Workspace, tmp_path: Path) -> None:
    ws.write_bytes("a/b/c.txt", b"hi")
    for rel in ("a", "a/b", "a/b/c.txt"):
        st = os.stat(tmp_path / "ws" / rel)
        assert (st.st_uid, st.st_gid) == (UID, UID), rel


def test_a_symlink_is_still_refused_not_followed(ws: Workspace, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"root's")
    os.symlink(outside, tmp_path / "ws" / "link")
    with pytest.raises(InvalidPath):
        ws.read_bytes("link")
    with pytest.raises(InvalidPath):
        ws.write_bytes("link", b"x")
    assert outside.read_bytes() == b"root's"


def test_the_thread_is_root_again_after_each_operation(ws: Workspace) -> None:
    ws.write_bytes("x.txt", b"1")
    with pytest.raises(NotFound):
        ws.read_bytes("missing")
    assert current_fsuid() == 0


def test_the_switch_is_per_thread() -> None:
    seen: list[int] = []
    inside = threading.Event()
    done = threading.Event()

    def other() -> None:
        inside.wait(5)
        seen.append(current_fsuid())
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with acting_as((UID, UID)):
        inside.set()
        done.wait(5)
        assert current_fsuid() == UID
    thread.join()
    assert seen == [0]
