"""Workspace operations on a real directory: atomic writes, limits, listing, moves, manager."""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.config import Settings
from runtime.errors import Conflict, InvalidPath, NotFound, PayloadTooLarge
from runtime.workspace import Workspace, WorkspaceLimits, Workspaces

TENANT = "t_0123456789abcdef"
SESSION = "s_fedcba9876543210"
IS_ROOT = os.geteuid() == 0


def _ws(tmp_path: Path, **limits: int) -> tuple[Workspaces, Path, Workspace]:
    wss = Workspaces(tmp_path / "workspaces", limits=WorkspaceLimits(**limits))
    root = wss.create(TENANT, SESSION)
    return wss, root, wss.open(TENANT, SESSION)


@pytest.fixture
def ws(tmp_path: Path) -> Iterator[Workspace]:
    _, _, w = _ws(tmp_path)
    with w:
        yield w


def _leftovers(root: Path) -> list[str]:
    return [p.name for p in root.rglob("*") if p.name.startswith(".navi-tmp-")]


# -- manager -------------------------------------------------------------------------------

def test_create_layout_modes_and_owner(tmp_path: Path) -> None:
    wss = Workspaces(tmp_path / "workspaces", sandbox_uid=4242, sandbox_gid=4343)
    root = wss.create(TENANT, SESSION)
    assert root == tmp_path / "workspaces" / TENANT / SESSION / "workspace"
    st = root.stat()
    assert stat.S_IMODE(st.st_mode) == 0o770
    assert stat.S_IMODE(root.parent.stat().st_mode) == 0o711  # the session dir: ours
    tenant_st = root.parent.parent.stat()
    assert stat.S_IMODE(tenant_st.st_mode) & 0o022 == 0  # the sandbox cannot swap sessions
    if IS_ROOT:
        assert (st.st_uid, st.st_gid) == (4242, 4343)
        assert tenant_st.st_uid == 0
    with wss.open(TENANT, SESSION) as w:
        w.write_bytes("d/f.txt", b"x")
    f, d = (root / "d" / "f.txt").stat(), (root / "d").stat()
    assert stat.S_IMODE(f.st_mode) == 0o660 and stat.S_IMODE(d.st_mode) == 0o770
    if IS_ROOT:
        assert (f.st_uid, f.st_gid) == (4242, 4343) == (d.st_uid, d.st_gid)


def test_from_settings_uses_data_dir(tmp_path: Path) -> None:
    wss = Workspaces.from_settings(Settings(data_dir=tmp_path, sandbox_uid=1234))
    assert wss.path(TENANT, SESSION) == tmp_path / "workspaces" / TENANT / SESSION / "workspace"
    assert wss.sandbox_uid == wss.sandbox_gid == 1234


def test_open_missing_and_remove(tmp_path: Path) -> None:
    wss = Workspaces(tmp_path / "workspaces")
    with pytest.raises(NotFound):
        wss.open(TENANT, SESSION)
    assert wss.remove(TENANT, SESSION) is False
    root = wss.create(TENANT, SESSION)
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "c").write_bytes(b"x")
    assert wss.verify(TENANT, SESSION) == root
    assert wss.remove(TENANT, SESSION) is True
    assert not root.parent.exists() and root.parent.parent.exists()
    with pytest.raises(NotFound):
        wss.open(TENANT, SESSION)


def test_tenants_are_separate_directories(tmp_path: Path) -> None:
    wss = Workspaces(tmp_path / "workspaces")
    other = "t_1111111111111111"
    wss.create(TENANT, SESSION)
    wss.create(other, SESSION)
    with wss.open(TENANT, SESSION) as a, wss.open(other, SESSION) as b:
        a.write_bytes("mine.txt", b"a")
        assert b.list() == []
        with pytest.raises(NotFound):
            b.read_bytes("mine.txt")


# -- reading and writing -------------------------------------------------------------------

def test_write_read_stat_roundtrip(ws: Workspace) -> None:
    entry = ws.write_bytes("dir/sub/hello.txt", b"hello")
    assert (entry.path, entry.size) == ("dir/sub/hello.txt", 5)
    assert ws.read_bytes("dir/sub/hello.txt") == b"hello"
    assert ws.stat("dir/sub/hello.txt").kind == "file"
    assert ws.stat("dir").kind == "dir"
    assert ws.stat("").kind == "dir"
    ws.write_bytes("dir/sub/hello.txt", [b"a", b"b", b"c"])  # chunks, replacing
    assert ws.read_bytes("dir/sub/hello.txt") == b"abc"
    with pytest.raises(InvalidPath):
        ws.read_bytes("dir")
    with pytest.raises(InvalidPath):
        ws.write_bytes("dir", b"x")
    with pytest.raises(InvalidPath):
        ws.write_bytes("dir/sub/hello.txt/x", b"x")
    with pytest.raises(NotFound):
        ws.read_bytes("nope.txt")


def test_streaming_reader_caps_at_size_seen_when_opened(tmp_path: Path) -> None:
    _, root, ws = _ws(tmp_path)
    with ws:
        ws.write_bytes("big.bin", os.urandom(300_000))
        reader = ws.open_read("big.bin")
        assert reader.size == 300_000
        with open(root / "big.bin", "ab") as grow:  # the sandbox appends meanwhile
            grow.write(b"more")
        chunks = list(reader)
        assert sum(map(len, chunks)) == 300_000 and len(chunks) > 1
        assert reader._fd == -1  # closed itself at the end


def test_write_is_atomic(tmp_path: Path) -> None:
    _, root, ws = _ws(tmp_path)
    with ws:
        ws.write_bytes("f.txt", b"old")
        w = ws.writer("f.txt")
        w.write(b"new content, ")
        assert ws.read_bytes("f.txt") == b"old"  # readers see the old file until commit
        assert ws.list()[0].path == "f.txt" and len(ws.list()) == 1  # temp file is hidden
        w.write(b"finished")
        w.commit()
        assert ws.read_bytes("f.txt") == b"new content, finished"
        assert _leftovers(root) == []


def test_failed_upload_keeps_old_content_and_no_temp(tmp_path: Path) -> None:
    _, root, ws = _ws(tmp_path)

    def chunks() -> Iterator[bytes]:
        yield b"partial"
        raise ConnectionError("client went away")

    with ws:
        ws.write_bytes("f.txt", b"old")
        with pytest.raises(ConnectionError):
            ws.write_bytes("f.txt", chunks())
        with pytest.raises(ConnectionError), ws.writer("g.txt") as w:
            w.write(b"x")
            raise ConnectionError
        assert ws.read_bytes("f.txt") == b"old"
        assert [e.path for e in ws.list()] == ["f.txt"]
        assert _leftovers(root) == []


def test_concurrent_readers_never_see_torn_file(ws: Workspace) -> None:
    a, b = b"A" * 200_000, b"B" * 200_000
    ws.write_bytes("f", a)
    stop = threading.Event()

    def writer() -> None:
        while not stop.is_set():
            ws.write_bytes("f", b)
            ws.write_bytes("f", a)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    try:
        for _ in range(200):
            assert ws.read_bytes("f") in (a, b)
    finally:
        stop.set()
        t.join(10)


# -- limits --------------------------------------------------------------------------------

def test_file_replaced_after_open_is_still_a_file(tmp_path: Path) -> None:
    """A reader racing an atomic replace holds a file whose link count is 0, not a hard link."""
    from runtime.workspace.fs import classify

    target = tmp_path / "f"
    target.write_bytes(b"old")
    fd = os.open(target, os.O_RDONLY)
    try:
        target.unlink()
        assert os.fstat(fd).st_nlink == 0
        assert classify(os.fstat(fd), "f") == "file"
    finally:
        os.close(fd)
    (tmp_path / "a").write_bytes(b"x")
    os.link(tmp_path / "a", tmp_path / "b")
    with pytest.raises(InvalidPath, match="hard-linked"):
        classify(os.stat(tmp_path / "a"), "a")


def test_upload_limit(tmp_path: Path) -> None:
    _, root, ws = _ws(tmp_path, max_file_bytes=1000)
    with ws:
        ws.write_bytes("ok.bin", b"x" * 1000)
        with pytest.raises(PayloadTooLarge) as info:
            ws.write_bytes("big.bin", b"x" * 1001)
        assert info.value.details["limit"] == 1000
        with pytest.raises(PayloadTooLarge):
            ws.write_bytes("big.bin", iter([b"x" * 600, b"x" * 600]))  # streamed
        with pytest.raises(PayloadTooLarge):
            ws.writer("big.bin", expected_size=5000)  # fails before reading a byte
        ws.write_bytes("big.bin", b"x" * 5000, max_bytes=5000)  # caller-configurable
        assert {e.path for e in ws.list()} == {"ok.bin", "big.bin"}
        assert _leftovers(root) == []


def test_session_disk_limit_counts_sandbox_files(tmp_path: Path) -> None:
    _, root, ws = _ws(tmp_path, max_disk_bytes=3000)
    with ws:
        (root / "from-sandbox.bin").write_bytes(b"s" * 2000)
        ws.write_bytes("a.bin", b"a" * 500)
        assert ws.usage_bytes() == 2500
        with pytest.raises(PayloadTooLarge) as info:
            ws.write_bytes("b.bin", b"b" * 501)
        assert "disk" in info.value.message
        ws.write_bytes("a.bin", b"a" * 1000)  # replacing: the old size is freed
        assert ws.usage_bytes() == 3000
        with pytest.raises(PayloadTooLarge):
            ws.write_bytes("c.bin", b"c")
        assert _leftovers(root) == []


def test_read_bytes_limit(tmp_path: Path) -> None:
    _, _, ws = _ws(tmp_path, max_read_bytes=10)
    with ws:
        ws.write_bytes("f", b"x" * 11)
        with pytest.raises(PayloadTooLarge):
            ws.read_bytes("f")
        assert ws.read_bytes("f", max_bytes=11) == b"x" * 11
        assert b"".join(ws.open_read("f")) == b"x" * 11


# -- listing -------------------------------------------------------------------------------

def test_list_is_recursive_sorted_and_scoped(ws: Workspace) -> None:
    for p in ["b.txt", "a/z.txt", "a/b/c.txt", "a.txt"]:
        ws.write_bytes(p, p.encode())
    ws.mkdir("empty/dir")
    assert [e.path for e in ws.list()] == ["a.txt", "a/b/c.txt", "a/z.txt", "b.txt"]
    assert [e.path for e in ws.list("a/b")] == ["a/b/c.txt"]
    assert [e.size for e in ws.list("a")] == [len("a/b/c.txt"), len("a/z.txt")]
    with pytest.raises(NotFound):
        ws.list("missing")


def test_list_skips_unaddressable_names_and_bounds(tmp_path: Path) -> None:
    _, root, ws = _ws(tmp_path, max_list_entries=5, max_scan_entries=50)
    with ws:
        (root / "bad\nname").write_bytes(b"x")
        os.close(os.open(os.fsencode(root) + b"/\xff\xfe", os.O_CREAT | os.O_WRONLY, 0o600))
        (root / "%2e%2e").write_bytes(b"x")
        (root / "fine.txt").write_bytes(b"x")
        assert [e.path for e in ws.list()] == ["fine.txt"]
        for i in range(20):
            (root / f"f{i:02}").write_bytes(b"x")
        assert len(ws.list()) == 5
        for i in range(40):
            (root / f"g{i:02}").write_bytes(b"x")
        assert len(ws.list()) <= 5
        with pytest.raises(PayloadTooLarge):
            ws.usage_bytes()
        with pytest.raises(PayloadTooLarge):
            ws.write_bytes("new", b"x")  # cannot account for the disk: refuse


def test_deep_tree_is_bounded(tmp_path: Path) -> None:
    _, root, ws = _ws(tmp_path)
    with ws:
        deep = root
        for _ in range(60):
            deep = deep / "d"
            deep.mkdir()
        (deep / "bottom.txt").write_bytes(b"x")
        (root / "top.txt").write_bytes(b"x")
        assert [e.path for e in ws.list()] == ["top.txt"]


# -- mkdir, delete, move -------------------------------------------------------------------

def test_mkdir_delete(ws: Workspace) -> None:
    assert ws.mkdir("a/b/c").kind == "dir"
    assert ws.mkdir("a/b/c").kind == "dir"  # exists: fine
    ws.write_bytes("a/b/c/f", b"x")
    ws.write_bytes("a/g", b"y")
    with pytest.raises(InvalidPath):
        ws.mkdir("a/g/h")  # a file in the way
    ws.delete("a/g")
    ws.delete("a")
    assert ws.list() == []
    with pytest.raises(NotFound):
        ws.delete("a")
    with pytest.raises(InvalidPath):
        ws.delete("")


def test_move(ws: Workspace) -> None:
    ws.write_bytes("src.txt", b"1")
    ws.write_bytes("other.txt", b"2")
    assert ws.move("src.txt", "new/dir/dst.txt").path == "new/dir/dst.txt"
    assert ws.read_bytes("new/dir/dst.txt") == b"1"
    with pytest.raises(Conflict):
        ws.move("other.txt", "new/dir/dst.txt")
    ws.move("other.txt", "new/dir/dst.txt", overwrite=True)
    assert ws.read_bytes("new/dir/dst.txt") == b"2"
    with pytest.raises(InvalidPath):
        ws.move("new", "new/inside")
    with pytest.raises(NotFound):
        ws.move("missing", "x")
    ws.move("new", "renamed")
    assert [e.path for e in ws.list()] == ["renamed/dir/dst.txt"]


def test_closed_workspace_refuses_work(tmp_path: Path) -> None:
    _, _, ws = _ws(tmp_path)
    ws.close()
    ws.close()
    with pytest.raises(ValueError):
        ws.list()
