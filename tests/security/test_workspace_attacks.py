"""What sandboxed code may leave in its workspace must never give the host's files away.

Every test builds the attack on a real directory (as code in the container could: symlinks,
FIFOs, sockets, devices, hard links, swapped directories) and checks that the host-side
``Workspace`` refuses it with ``InvalidPath`` and that nothing outside changed. Each test runs
twice: with ``openat2`` and with the ``O_NOFOLLOW`` component walk.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from runtime.errors import ConfigError, InvalidInput, InvalidPath, NotFound
from runtime.workspace import Workspace, Workspaces, openat2_available

TENANT = "t_00000000000000aa"
SESSION = "s_00000000000000bb"
SECRET = b"TOP-SECRET host data\n"

RESOLVERS = [
    pytest.param(True, id="openat2",
                 marks=pytest.mark.skipif(not openat2_available(), reason="no openat2")),
    pytest.param(False, id="nofollow-walk"),
]


class Env:
    def __init__(self, tmp: Path, use_openat2: bool) -> None:
        self.outside = tmp / "outside"
        self.outside.mkdir()
        self.secret = self.outside / "secret.txt"
        self.secret.write_bytes(SECRET)
        self.manager = Workspaces(tmp / "data" / "workspaces", use_openat2=use_openat2)
        self.root = self.manager.create(TENANT, SESSION)
        self.ws = self.manager.open(TENANT, SESSION)
        assert self.ws.uses_openat2 is use_openat2

    def as_sandbox(self, *names: str) -> None:
        """Give what the test (root) planted to the workspace's owner, as if the sandbox
        had made it: the workspace acts as that uid."""
        st = os.stat(self.root)
        for name in names:
            os.chown(self.root / name, st.st_uid, st.st_gid, follow_symlinks=False)

    def outside_snapshot(self) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(self.outside.iterdir()) if p.is_file()}


@pytest.fixture(params=RESOLVERS)
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path, request.param)
    yield e
    e.ws.close()


def _refused(fn: Callable[[], object]) -> InvalidPath:
    with pytest.raises(InvalidPath) as info:
        fn()
    assert "pytest-of" not in info.value.message, "a host path leaked into the message"
    assert "/etc" not in info.value.message
    return info.value


# -- traversal strings ---------------------------------------------------------------------

TRAVERSALS = [
    "../outside/secret.txt", "../../outside/secret.txt", "../", "..", "a/../../secret.txt",
    "%2e%2e/outside/secret.txt", "..%2foutside%2fsecret.txt", "%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "/etc/passwd", "//etc/passwd", "secret.txt\x00.png", "..\\..\\etc\\passwd",
    "\uff0e\uff0e/outside/secret.txt", "", "x" * 300, "/".join(["d"] * 40),
]


@pytest.mark.parametrize("path", TRAVERSALS)
def test_traversal_strings_refused_by_every_operation(env: Env, path: str) -> None:
    ws = env.ws
    _refused(lambda: ws.read_bytes(path))
    _refused(lambda: ws.open_read(path))
    _refused(lambda: ws.write_bytes(path, b"pwned"))
    _refused(lambda: ws.delete(path))
    _refused(lambda: ws.mkdir(path))
    _refused(lambda: ws.move(path, "x"))
    _refused(lambda: ws.move("x", path))
    if path:  # "" is the workspace itself for stat/list
        _refused(lambda: ws.stat(path))
        _refused(lambda: ws.list(path))
    assert env.outside_snapshot() == {"secret.txt": SECRET}


# -- symlinks ------------------------------------------------------------------------------

def test_symlink_to_etc_passwd_is_not_read(env: Env) -> None:
    os.symlink("/etc/passwd", env.root / "passwd")
    _refused(lambda: env.ws.read_bytes("passwd"))
    _refused(lambda: env.ws.open_read("passwd"))
    _refused(lambda: env.ws.stat("passwd"))
    assert env.ws.list() == []


def test_relative_symlink_escaping_is_not_read(env: Env) -> None:
    os.symlink("../../../../outside/secret.txt", env.root / "rel")
    _refused(lambda: env.ws.read_bytes("rel"))


def test_symlink_to_outside_dir_is_not_entered(env: Env) -> None:
    os.symlink(env.outside, env.root / "out")
    _refused(lambda: env.ws.read_bytes("out/secret.txt"))
    _refused(lambda: env.ws.list("out"))
    _refused(lambda: env.ws.write_bytes("out/new.txt", b"pwned"))
    _refused(lambda: env.ws.write_bytes("out/sub/new.txt", b"pwned"))
    _refused(lambda: env.ws.mkdir("out/newdir"))
    _refused(lambda: env.ws.delete("out/secret.txt"))
    _refused(lambda: env.ws.delete("out"))
    _refused(lambda: env.ws.move("out/secret.txt", "stolen.txt"))
    _refused(lambda: env.ws.move("out", "stolen"))
    assert env.ws.list() == []
    assert env.outside_snapshot() == {"secret.txt": SECRET}
    assert sorted(p.name for p in env.outside.iterdir()) == ["secret.txt"]


def test_symlinked_intermediate_directory(env: Env) -> None:
    (env.root / "a").mkdir()
    os.symlink(env.outside, env.root / "a" / "b")
    _refused(lambda: env.ws.read_bytes("a/b/secret.txt"))
    _refused(lambda: env.ws.write_bytes("a/b/secret.txt", b"pwned"))
    _refused(lambda: env.ws.move("a/b/secret.txt", "x"))
    assert env.outside_snapshot() == {"secret.txt": SECRET}


def test_write_through_final_symlink_never_touches_target(env: Env) -> None:
    os.symlink(env.secret, env.root / "victim")
    _refused(lambda: env.ws.write_bytes("victim", b"pwned"))
    assert env.secret.read_bytes() == SECRET
    assert os.path.islink(env.root / "victim")


def test_move_onto_symlink_refused(env: Env) -> None:
    env.ws.write_bytes("mine.txt", b"mine")
    os.symlink(env.secret, env.root / "victim")
    _refused(lambda: env.ws.move("mine.txt", "victim", overwrite=True))
    assert env.secret.read_bytes() == SECRET


def test_delete_tree_with_links_inside_keeps_targets(env: Env) -> None:
    (env.root / "tree" / "deep").mkdir(parents=True)
    os.symlink(env.outside, env.root / "tree" / "deep" / "out")
    os.symlink(env.secret, env.root / "tree" / "s")
    env.as_sandbox("tree", "tree/deep")  # the sandbox's tree (the API acts as its uid)
    env.ws.delete("tree")
    assert not (env.root / "tree").exists()
    assert env.outside_snapshot() == {"secret.txt": SECRET}


def test_listing_never_follows_links(env: Env) -> None:
    env.ws.write_bytes("real/file.txt", b"x")
    os.symlink(env.outside, env.root / "real" / "out")
    os.symlink("/", env.root / "slash")
    os.symlink(env.secret, env.root / "real" / "s.txt")
    assert [e.path for e in env.ws.list()] == ["real/file.txt"]
    assert env.ws.usage_bytes() == 1


# -- special files -------------------------------------------------------------------------

def test_fifo_is_refused_without_blocking(env: Env) -> None:
    fifo = env.root / "pipe"
    os.mkfifo(fifo)
    outcome: list[BaseException | None] = []

    def attempt() -> None:
        try:
            env.ws.read_bytes("pipe")
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            outcome.append(exc)

    t = threading.Thread(target=attempt, daemon=True)
    t.start()
    t.join(5)
    if t.is_alive():  # unblock the reader so the test run can end, then fail
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        t.join(5)
        pytest.fail("reading a FIFO blocked")
    assert len(outcome) == 1 and isinstance(outcome[0], InvalidPath)
    _refused(lambda: env.ws.stat("pipe"))
    _refused(lambda: env.ws.write_bytes("pipe", b"x"))
    _refused(lambda: env.ws.delete("pipe"))
    assert env.ws.list() == []


def test_unix_socket_is_refused(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    sock = socket.socket(socket.AF_UNIX)
    monkeypatch.chdir(env.root)  # AF_UNIX path length limit: bind relative
    sock.bind("sock")
    try:
        _refused(lambda: env.ws.read_bytes("sock"))
        _refused(lambda: env.ws.stat("sock"))
        assert env.ws.list() == []
    finally:
        sock.close()


def test_device_node_is_refused(env: Env) -> None:
    try:
        os.mknod(env.root / "null", 0o600 | 0o020000, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("cannot create device nodes here")
    env.as_sandbox("null")  # readable by the uid the API acts as: refused for what it is
    _refused(lambda: env.ws.read_bytes("null"))
    _refused(lambda: env.ws.stat("null"))
    assert env.ws.list() == []


def test_hard_link_to_outside_file_is_refused(env: Env) -> None:
    try:
        os.link(env.secret, env.root / "hl")
    except OSError as exc:
        pytest.skip(f"cannot hard-link here: {exc}")
    _refused(lambda: env.ws.read_bytes("hl"))
    _refused(lambda: env.ws.open_read("hl"))
    _refused(lambda: env.ws.write_bytes("hl", b"pwned"))
    _refused(lambda: env.ws.move("hl", "mine"))
    assert env.ws.list() == []
    assert env.secret.read_bytes() == SECRET


def test_mount_point_is_not_crossed(env: Env) -> None:
    mnt = env.root / "mnt"
    mnt.mkdir()
    if os.system(f"mount -t tmpfs -o size=1m navi-test {mnt} 2>/dev/null") != 0:
        pytest.skip("cannot mount here")
    try:
        (mnt / "f").write_bytes(b"other fs")
        _refused(lambda: env.ws.read_bytes("mnt/f"))
        assert env.ws.list() == []
    finally:
        os.system(f"umount {mnt}")


# -- swapped directories (time of check / time of use) -------------------------------------

def test_directory_swapped_for_symlink_after_open_is_not_followed(env: Env) -> None:
    env.ws.write_bytes("sub/secret.txt", b"inside")
    assert env.ws.read_bytes("sub/secret.txt") == b"inside"
    os.rename(env.root / "sub", env.root / "old")
    os.symlink(env.outside, env.root / "sub")  # what sandboxed code could do meanwhile
    _refused(lambda: env.ws.read_bytes("sub/secret.txt"))
    _refused(lambda: env.ws.write_bytes("sub/secret.txt", b"pwned"))
    assert env.outside_snapshot() == {"secret.txt": SECRET}


def test_racing_directory_symlink_swap_never_leaks(env: Env) -> None:
    """A thread flips ``d`` between a real directory and a symlink to the outside while the
    host reads ``d/secret.txt`` in a loop: every successful read must be the inside file."""
    (env.root / "real").mkdir()
    (env.root / "real" / "secret.txt").write_bytes(b"inside")
    stop = threading.Event()

    def flip_dir() -> None:
        d = env.root / "d"
        while not stop.is_set():
            os.rename(env.root / "real", d)          # d is the real directory
            time.sleep(0.0002)
            os.rename(d, env.root / "real")
            os.symlink(env.outside, d)               # d points outside
            time.sleep(0.0002)
            os.unlink(d)

    t = threading.Thread(target=flip_dir, daemon=True)
    t.start()
    reads = refused = 0
    deadline = time.monotonic() + 10
    try:
        while time.monotonic() < deadline and min(reads, refused) < 300:
            try:
                data = env.ws.read_bytes("d/secret.txt")
            except (InvalidPath, NotFound):
                refused += 1
                continue
            reads += 1
            assert data == b"inside", "read through a swapped-in symlink"
    finally:
        stop.set()
        t.join(5)
    assert refused > 0 and reads > 0  # both states were actually hit


# -- the manager ---------------------------------------------------------------------------

def test_session_dir_replaced_by_symlink_is_refused(tmp_path: Path) -> None:
    wss = Workspaces(tmp_path / "ws")
    root = wss.create(TENANT, SESSION)
    os.rmdir(root)
    os.symlink("/etc", root)
    with pytest.raises(ConfigError):
        wss.open(TENANT, SESSION)
    with pytest.raises(ConfigError):
        wss.verify(TENANT, SESSION)
    assert wss.remove(TENANT, SESSION) is True  # unlinks the link, never rmtree's /etc
    assert os.path.isdir("/etc") and os.path.exists("/etc/passwd")


@pytest.mark.parametrize(
    ("tenant", "session"),
    [("..", SESSION), (TENANT, ".."), ("t_../../etc", SESSION), (TENANT, "s_0/../../x"),
     ("/etc", SESSION), (TENANT.upper(), SESSION), (TENANT, SESSION + "\x00")],
)
def test_manager_validates_ids(tmp_path: Path, tenant: str, session: str) -> None:
    wss = Workspaces(tmp_path / "ws")
    for op in (wss.create, wss.open, wss.remove, wss.path):
        with pytest.raises(InvalidInput):
            op(tenant, session)
    assert not (tmp_path / "ws").exists() or list((tmp_path / "ws").iterdir()) == []


def test_workspace_at_refuses_symlinked_root(tmp_path: Path) -> None:
    os.symlink("/etc", tmp_path / "ws")
    with pytest.raises(OSError):
        Workspace.at(tmp_path / "ws")
