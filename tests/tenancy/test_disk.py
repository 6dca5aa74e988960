"""Noisy neighbours, disk and users: one tenant cannot fill the server's disk, store more than
its quotas, outlive its sessions on disk, share a uid with another tenant or leave mounts.

Real `navi serve` processes and real containers, with the strict disk default (no
overcommit) and small quotas so that filling them is quick.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from runtime.workspace.mount_table import mounts_under
from tests.e2e.conftest import ROOT, Server, start_server, stop_server

pytestmark = pytest.mark.docker

POLICY = (ROOT / "policies" / "default.yaml").read_text().replace(
    "    session_disk_mb: 1024", "    session_disk_mb: 32").replace(
    "    tenant_disk_mb: 10240", "    tenant_disk_mb: 96").replace(
    "    upload_mb: 100", "    upload_mb: 64")
MiB = 1024 * 1024


def strict_server(tmp: Path) -> Server:
    policy = tmp / "policy.yaml"
    policy.write_text(POLICY)
    assert "session_disk_mb: 32" in POLICY and "tenant_disk_mb: 96" in POLICY
    return start_server(tmp, policy, extra_env={"NAVI_DISK_OVERCOMMIT": "1"})


def restart(srv: Server, tmp_path: Path) -> Server:
    """A new server on the data dir and admin token of ``srv`` (killed: it left what it left)."""
    (tmp_path / "again").mkdir()
    return start_server(tmp_path / "again", tmp_path / "policy.yaml",
                        extra_env={"NAVI_DATA_DIR": str(srv.data_dir),
                                   "NAVI_ADMIN_TOKEN": srv.admin_token,
                                   "NAVI_DISK_OVERCOMMIT": "1"})


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = strict_server(tmp_path_factory.mktemp("tenancy-disk"))
    yield srv
    stop_server(srv)


def run(client: httpx.Client, session: str, command: str) -> dict:
    resp = client.post(f"/v1/sessions/{session}/exec",
                       json={"tool": "terminal", "args": {"command": command}})
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def new_session(client: httpx.Client) -> str:
    resp = client.post("/v1/sessions", json={})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


def images(server: Server) -> list[Path]:
    return sorted((server.data_dir / "workspaces").glob("t_*/s_*.img"))


def stored_bytes(path: Path) -> int:
    return path.stat().st_blocks * 512


def test_dd_past_the_quota_fails_in_the_sandbox(server: Server) -> None:
    _, token = server.tenant_with_user()
    with server.client(token) as client:
        session = new_session(client)
        result = run(client, session, "dd if=/dev/zero of=big bs=1M count=100; echo rc=$?; "
                                      "ls -l big")
        assert "No space left on device" in result["stderr"], result
        assert "rc=1" in result["stdout"], result
        image = next(p for p in images(server) if p.stem == session)
        assert stored_bytes(image) <= 33 * MiB  # the host holds at most the quota
        # the session is full, not broken: freeing space makes it usable again
        assert run(client, session, "rm big && echo hi > small && cat small")["stdout"] == "hi\n"
        # another tenant's exec and the audit chain are unaffected
        _, other = server.tenant_with_user()
        with server.client(other) as neighbour:
            assert run(neighbour, new_session(neighbour), "echo ok")["stdout"] == "ok\n"
    verify = subprocess.run([sys.executable, "-m", "runtime.cli", "audit", "verify",
                             "--data-dir", str(server.data_dir)],
                            cwd=ROOT, capture_output=True, text=True, check=False)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_huge_prints_cannot_fill_the_host(server: Server) -> None:
    _, token = server.tenant_with_user()
    with server.client(token) as client:
        session = new_session(client)
        code = "import sys\nfor _ in range(160):\n    sys.stdout.write('x' * (1 << 20))\n"
        resp = client.post(f"/v1/sessions/{session}/exec",
                           json={"tool": "code_exec", "args": {"language": "python",
                                                                "code": code}})
        assert resp.status_code == 200 and resp.json()["truncated"] is True, resp.text
        image = next(p for p in images(server) if p.stem == session)
        assert stored_bytes(image) <= 33 * MiB  # the full output went to the session's disk
        assert not (server.data_dir / "artifacts" / session).exists()


def test_upload_past_the_quota_is_413_disk_quota(server: Server) -> None:
    _, token = server.tenant_with_user()
    with server.client(token) as client:
        session = new_session(client)
        resp = client.put(f"/v1/sessions/{session}/files/big.bin", content=b"\0" * (40 * MiB),
                          headers={"Content-Type": "application/octet-stream"})
        assert resp.status_code == 413, resp.text
        assert resp.json()["error"]["code"] == "disk_quota"
        assert client.get(f"/v1/sessions/{session}/files").json() == []
        # without Content-Length (chunked), the write stops at the quota
        chunks = (b"\0" * MiB for _ in range(40))
        resp = client.put(f"/v1/sessions/{session}/files/big.bin", content=chunks,
                          headers={"Content-Type": "application/octet-stream"})
        assert resp.status_code == 413 and resp.json()["error"]["code"] == "disk_quota"
        assert client.get(f"/v1/sessions/{session}/files").json() == []


def test_artifacts_and_disk_go_with_the_session(server: Server) -> None:
    _, token = server.tenant_with_user()
    with server.client(token) as client:
        session = new_session(client)
        resp = client.post(f"/v1/sessions/{session}/exec", json={
            "tool": "code_exec",
            "args": {"language": "python", "code": "print('y' * (3 << 20))"}})
        assert resp.json()["truncated"] is True
        session_dir = next(p for p in images(server) if p.stem == session).with_suffix("")
        assert any((session_dir / "artifacts").iterdir())
        assert client.delete(f"/v1/sessions/{session}").status_code == 204
    assert not session_dir.exists() and not session_dir.with_suffix(".img").exists()
    assert str(session_dir) not in mounts_under(server.data_dir)


def test_tenant_quota_caps_its_sessions_disks(server: Server) -> None:
    """Active sessions count their size, idle ones what they hold: a 4th session of a full
    quota releases the least recently used one; sessions that hold the quota (idle, full of
    data) make it a 413."""
    _, token = server.tenant_with_user()
    with server.client(token) as client:
        sessions = [new_session(client) for _ in range(3)]  # 3 x 32 MiB = the 96 MiB quota
        assert {client.get(f"/v1/sessions/{s}").json()["state"] for s in sessions} == \
            {"active"}
        fourth = new_session(client)
        assert client.get(f"/v1/sessions/{sessions[0]}").json()["state"] == "idle"
        assert client.get(f"/v1/sessions/{fourth}").json()["state"] == "active"
        for s in (*sessions, fourth):  # what each holds: 3 x 26 MiB, past 96 - 32 MiB
            if s != sessions[0]:
                run(client, s, "head -c 26M /dev/zero | tr '\\0' x > big; sync")
        resp = client.post("/v1/sessions", json={})
        assert resp.status_code == 413 and resp.json()["error"]["code"] == "disk_quota"
        assert client.delete(f"/v1/sessions/{sessions[1]}").status_code == 204
        new_session(client)


def test_each_tenant_runs_as_its_own_stable_uid(server: Server) -> None:
    uids = []
    for _ in range(2):
        _, token = server.tenant_with_user()
        with server.client(token) as client:
            first, second = new_session(client), new_session(client)
            seen = {run(client, s, "id -u; id -g")["stdout"] for s in (first, second, first)}
            assert len(seen) == 1, seen  # stable within a tenant, cold and warm
            uid = int(seen.pop().split()[0])
            assert uid >= 200000
            with pytest.raises(KeyError):
                __import__("pwd").getpwuid(uid)
            listing = client.get(f"/v1/sessions/{first}/files").json()
            assert listing == []
            uids.append(uid)
    assert uids[0] != uids[1]


def test_no_mount_outlives_a_killed_supervisor(tmp_path: Path) -> None:
    srv = strict_server(tmp_path)
    try:
        _, token = srv.tenant_with_user()
        with srv.client(token) as client:
            session = new_session(client)
            assert run(client, session, "echo kept > f; cat f")["stdout"] == "kept\n"
        assert mounts_under(srv.data_dir)
        srv.process.send_signal(signal.SIGKILL)
        srv.process.wait()
        deadline = time.monotonic() + 10
        while mounts_under(srv.data_dir) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert mounts_under(srv.data_dir) == []  # the guard released them
    finally:
        stop_server(srv)
    again = restart(srv, tmp_path)
    try:
        with again.client(token) as client:  # same data dir: the session still works
            assert run(client, session, "cat f")["stdout"] == "kept\n"
    finally:
        stop_server(again)
    assert mounts_under(srv.data_dir) == [], again.ending()


def test_startup_releases_what_a_killed_instance_left(tmp_path: Path) -> None:
    srv = strict_server(tmp_path)
    try:
        _, token = srv.tenant_with_user()
        with srv.client(token) as client:
            session = new_session(client)
            run(client, session, "echo kept > f")
        guards = [int(p) for p in subprocess.run(
            ["pgrep", "-P", str(srv.process.pid), "-f", "runtime.workspace.mount_guard"],
            capture_output=True, text=True, check=False).stdout.split()]
        # the session disks' guard, and the tenant pool's for its bind root (late bind)
        assert 1 <= len(guards) <= 2
        for guard in guards:  # the guards first (ours: the server's children)
            os.kill(guard, signal.SIGKILL)
        srv.process.send_signal(signal.SIGKILL)
        srv.process.wait()
        left = mounts_under(srv.data_dir)
        assert left  # nothing released them
    finally:
        stop_server(srv)
    again = restart(srv, tmp_path)
    try:
        # released at start-up: only the new instance's own root bind mount (once, not
        # stacked on the old one) and its own tenant-pool bind root (none of the killed
        # instance's), no session disk until the session is used
        now = mounts_under(srv.data_dir)
        bind_root = str(srv.data_dir / "bind") + "/"
        own_bind = [m for m in now if m.startswith(bind_root)]
        assert [m for m in now if m not in own_bind] == [str(srv.data_dir / "workspaces")], left
        assert len(own_bind) <= 1, now
        assert all("/" not in m[len(bind_root):] for m in own_bind), now  # a root, no slot
        assert not set(own_bind) & set(left), (own_bind, left)
        with again.client(token) as client:
            assert run(client, session, "cat f")["stdout"] == "kept\n"
    finally:
        stop_server(again)
    assert mounts_under(srv.data_dir) == [], again.ending()


async def test_session_disks_stay_visible_when_the_engine_comes_up_later(
        tmp_path: Path, sandbox_image: str) -> None:
    """The backend makes the workspaces root nosuid,nodev with a bind mount of itself when it
    starts; if that happens after session disks were mounted (the engine was down at start),
    a plain bind hid them ("mount source does not exist"). Red with `mount --bind`."""
    from runtime.sandbox.docker.backend import DockerBackend, DockerBackendConfig
    from runtime.sandbox.models import ExecRequest, Limits
    from runtime.workspace import Workspaces
    from runtime.workspace.disk import SessionDisks

    root = tmp_path / "workspaces"
    spaces = Workspaces(root, disks=SessionDisks(root, overcommit=1000.0))
    tenant, session = "t_00000000000000aa", "s_00000000000000aa"
    workspace = spaces.create(tenant, session, uid=200000, disk_bytes=32 * MiB,
                              tenant_disk_bytes=64 * MiB)
    backend = DockerBackend(DockerBackendConfig(data_dir=tmp_path, workspaces_root=root,
                                                instance_id="navi-test-late-engine"))
    try:
        await backend.start()
        result = await backend.run(ExecRequest(
            image=sandbox_image, argv=["sh", "-c", "echo ok > f; cat f"], exec_id="late-1",
            session=session, workspace=workspace, uid=200000, limits=Limits(timeout_s=30)))
        assert result.stdout == b"ok\n", result
        assert (workspace / "f").read_bytes() == b"ok\n"
    finally:
        await backend.close()
        spaces.close()
        spaces.remove(tenant, session)
    assert mounts_under(root) == []
