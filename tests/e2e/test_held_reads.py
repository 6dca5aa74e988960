"""Stalled readers against a real `navi serve` with real loop-mounted session disks: a client
that stops reading a download (or an anonymous shared link) cannot keep a deleted session's
loop device and image alive (gone within 5 s of DELETE), is cut after NAVI_SEND_TIMEOUT_S,
and a restore ends reads in flight instead of waiting for them."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from runtime.client import InvalidPathSegment, NaviClient
from runtime.workspace.disk import loop_mounts_available
from tests.e2e.conftest import Server, start_server, stop_server

POLICY = Path(__file__).parent / "policies" / "held_reads.yaml"  # 48 MiB session disks
BIG = 32 * 1024 * 1024  # far more than loopback socket buffers hold
SEND_TIMEOUT_S = 8

pytestmark = pytest.mark.skipif(not loop_mounts_available(),
                                reason="needs root, loop devices and mkfs.ext4")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("held"), policy=POLICY,
                       extra_env={"NAVI_DISK_OVERCOMMIT": "1", "NAVI_EMBEDDED_MODEL": "off",
                                  "NAVI_SEND_TIMEOUT_S": str(SEND_TIMEOUT_S)}, ready_s=120)
    yield srv
    stop_server(srv)


def _session_with_big_file(server: Server) -> tuple[str, str, str]:
    tenant, token = server.tenant_with_user()
    with server.client(token) as user:
        session = user.post("/v1/sessions", json={}).json()["id"]
        resp = user.put(f"/v1/sessions/{session}/files/big.bin", content=os.urandom(BIG),
                        headers={"Content-Type": "application/octet-stream"})
        assert resp.status_code == 201, resp.text
    return tenant, token, session


def _stalled(server: Server, path: str, token: str | None = None) -> socket.socket:
    """A client that asks for ``path``, reads the headers and a little, then stops reading."""
    host, port = server.url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n{auth}\r\n".encode())
    head = sock.recv(4096)
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    return sock


def _loop_device(image: Path) -> str:
    """The loop device backing ``image`` (``/sys/block/loopN``)."""
    for dev in Path("/sys/block").glob("loop*"):
        backing = dev / "loop" / "backing_file"
        if backing.exists() and backing.read_text().strip() == str(image):
            return str(dev)
    raise AssertionError(f"no loop device backs {image}")


def _attached(dev: str, image: Path) -> bool:
    backing = Path(dev) / "loop" / "backing_file"
    try:
        return backing.read_text().strip().startswith(str(image))  # "<path> (deleted)"
    except OSError:
        return False


def _held_by_server(server: Server, name: str) -> list[str]:
    found = []
    for fd in Path(f"/proc/{server.process.pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if name in target:
            found.append(target)
    return found


def _gone_within(server: Server, dev: str, image: Path, limit_s: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        if not _attached(dev, image) and not _held_by_server(server, "big.bin"):
            return time.monotonic() - started
        time.sleep(0.1)
    raise AssertionError(f"after {limit_s} s: loop device {dev} still backs {image} "
                         f"or the server holds {_held_by_server(server, 'big.bin')}")


def test_a_stalled_download_does_not_keep_a_deleted_sessions_disk(server: Server) -> None:
    tenant, token, session = _session_with_big_file(server)
    image = server.data_dir / "workspaces" / tenant / f"{session}.img"
    dev = _loop_device(image)
    sock = _stalled(server, f"/v1/sessions/{session}/files/big.bin", token)
    try:
        time.sleep(1.0)  # the server's send buffer fills; it now waits for the client
        assert _held_by_server(server, "big.bin"), "the download should be in flight"
        with server.client(token) as user:
            assert user.delete(f"/v1/sessions/{session}").status_code == 204
        took = _gone_within(server, dev, image, 5.0)
        assert not image.exists()
        print(f"loop device and file released {took:.2f} s after DELETE")
    finally:
        sock.close()


def test_a_stalled_shared_link_does_not_keep_a_deleted_sessions_disk(server: Server) -> None:
    tenant, token, session = _session_with_big_file(server)
    with server.client(token) as user:
        made = user.post(f"/v1/sessions/{session}/exec",
                         json={"tool": "share_file", "args": {"path": "big.bin"}}).json()
        assert made["ok"], made
        url = made["metadata"]["shared"]["url"]
    image = server.data_dir / "workspaces" / tenant / f"{session}.img"
    dev = _loop_device(image)
    socks = [_stalled(server, url) for _ in range(3)]  # anonymous, no token
    try:
        time.sleep(1.0)
        assert len(_held_by_server(server, "big.bin")) == 3
        with server.client(token) as user:
            assert user.delete(f"/v1/sessions/{session}").status_code == 204
        _gone_within(server, dev, image, 5.0)
    finally:
        for sock in socks:
            sock.close()


def test_a_client_that_stops_reading_is_cut_after_the_send_timeout(server: Server) -> None:
    _, token, session = _session_with_big_file(server)
    sock = _stalled(server, f"/v1/sessions/{session}/files/big.bin", token)
    try:
        started = time.monotonic()
        while _held_by_server(server, "big.bin") and time.monotonic() - started < 30:
            time.sleep(0.2)
        took = time.monotonic() - started
        assert not _held_by_server(server, "big.bin"), "the stalled download was never cut"
        assert SEND_TIMEOUT_S - 1 <= took <= SEND_TIMEOUT_S + 5, took
        with server.client(token) as user:  # the session's lease went with it: restorable
            snap = user.post(f"/v1/sessions/{session}/snapshots", json={}).json()["id"]
            resp = user.post(f"/v1/sessions/{session}/snapshots/{snap}/restore")
            assert resp.status_code == 200, resp.text
    finally:
        sock.close()


def test_a_restore_ends_reads_in_flight(server: Server) -> None:
    _, token, session = _session_with_big_file(server)
    with server.client(token) as user:
        snap = user.post(f"/v1/sessions/{session}/snapshots", json={}).json()["id"]
    sock = _stalled(server, f"/v1/sessions/{session}/files/big.bin", token)
    try:
        time.sleep(0.5)
        with server.client(token) as user:
            resp = user.post(f"/v1/sessions/{session}/snapshots/{snap}/restore")
            assert resp.status_code == 200, resp.text  # not 409: the read was cut
            assert not _held_by_server(server, "big.bin")
            got = user.get(f"/v1/sessions/{session}/files/big.bin")
            assert got.status_code == 200 and len(got.content) == BIG
    finally:
        sock.close()
    with httpx.Client(base_url=server.url) as anyone:
        assert anyone.get("/v1/healthz").status_code == 200


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_published_content_is_streamed_capped_per_link_and_expires(server: Server) -> None:
    _, token = server.tenant_with_user()
    with server.client(token) as user:
        session = user.post("/v1/sessions", json={}).json()["id"]
        # Markdown: the API's origin streams it (an HTML page is shown on its own origin,
        # through the same capped, held reads: tests/e2e/test_shares.py)
        page = b"# p\n\n" + b"x" * (9 * 1024 * 1024) + b"\n"
        assert user.put(f"/v1/sessions/{session}/files/page.md", content=page
                        ).status_code == 201
        links = []
        for _ in range(5):
            made = user.post(f"/v1/sessions/{session}/exec", json={
                "tool": "content_publish", "args": {"path": "page.md"}}).json()
            assert made["ok"], made
            links.append(made["metadata"]["published"])
        listed = user.get(f"/v1/sessions/{session}/shares").json()
    day = links[0]["expires_at"] - time.time()
    assert 86_300 < day <= 86_400, day  # publish links expire: one day by default
    assert all(r["expires_at"] for r in listed)
    before = _rss_kib(server.process.pid)
    socks = [_stalled(server, link["url"]) for link in links for _ in range(4)]  # 20 readers
    try:
        time.sleep(1.5)
        grown_mib = (_rss_kib(server.process.pid) - before) / 1024
        print(f"20 stalled readers of a 9 MiB published page: server RSS +{grown_mib:.1f} MiB")
        assert grown_mib < 60, grown_mib  # not 20 x 9 MiB: a few chunks per reader
        with httpx.Client(base_url=server.url) as anyone:  # a fifth reader of one link
            resp = anyone.get(links[0]["url"])
            assert resp.status_code == 429, resp.text
            assert resp.json()["error"]["code"] == "quota_exceeded"
            assert int(resp.headers["Retry-After"]) >= 1
    finally:
        for sock in socks:
            sock.close()
    time.sleep(0.5)
    with httpx.Client(base_url=server.url) as anyone:  # readers gone: the link reads again
        got = anyone.get(links[0]["url"])
        assert got.status_code == 200 and got.content == page
        assert "sandbox" in got.headers["content-security-policy"]


def test_the_client_refuses_dot_segments(server: Server) -> None:
    """`delete_file(s, "../../s_2")` once sent `DELETE /v1/sessions/s_2` (httpx collapses
    dot segments): the client refuses it, and the other session is still there."""
    _, token = server.tenant_with_user()
    with NaviClient(server.url, token) as client:
        one, two = (client.create_session().id for _ in range(2))
        for bad in (f"../../{two}", "a/../../..", "./x", f"/tmp/../../../{two}"):
            with pytest.raises(InvalidPathSegment):
                client.delete_file(one, bad)
        with pytest.raises(InvalidPathSegment):
            client.delete_session("..")
        assert {s.id for s in client.list_sessions()} >= {one, two}
