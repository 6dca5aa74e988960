"""Idle kernels are saved to their session's disk and stopped; the next execute restores them
(`restored`, `lost`); saved kernels survive a restart; saved state is unpickled only in the
kernel's own sandbox."""

from __future__ import annotations

import json
import os
import pickle
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest

from tests.e2e.conftest import Server, start_server, stop_server

pytestmark = pytest.mark.docker

IDLE = {"NAVI_KERNEL_IDLE_S": "1"}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = start_server(tmp_path, extra_env=IDLE, ready_s=180)
    yield srv
    stop_server(srv)


def execute(client: httpx.Client, session: str, code: str) -> dict[str, Any]:
    resp = client.post(f"/v1/sessions/{session}/kernels/default/execute", json={"code": code},
                       timeout=120)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def containers(api: docker.APIClient, session: str) -> list[dict[str, Any]]:
    return list(api.containers(all=True, filters={"label": f"navi.session={session}"}))


def wait_saved(client: httpx.Client, session: str, within_s: float = 60) -> list[dict[str, Any]]:
    deadline = time.monotonic() + within_s
    listed: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        listed = client.get(f"/v1/sessions/{session}/kernels").json()
        if listed and all(k["state"] == "saved" for k in listed):
            return listed
        time.sleep(0.2)
    raise AssertionError(f"not saved in {within_s} s: {listed}")


SETUP = ("import math\nx = 41\ndef inc(v):\n    return v + 1\n"
         "class Point:\n    def __init__(self, a):\n        self.a = a\n"
         "p = Point(3)\nimport socket\nsock = socket.socket()\ngen = (i for i in range(3))")


def test_idle_kernel_is_saved_stopped_and_restored(server: Server,
                                                   docker_api: docker.APIClient) -> None:
    _, token = server.tenant_with_user()
    with server.client(token) as client:
        session = client.post("/v1/sessions", json={}).json()["id"]
        assert execute(client, session, SETUP)["ok"]
        assert len(containers(docker_api, session)) == 1
        (saved,) = wait_saved(client, session)
        assert saved["name"] == "default" and saved["last_used_at"] >= saved["started_at"]
        deadline = time.monotonic() + 20
        while containers(docker_api, session) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert containers(docker_api, session) == []  # 0 containers: 0 bytes of RAM
        back = execute(client, session, "inc(x), math.pi > 3, p.a")
        assert back["results"] == [{"text/plain": "(42, True, 3)"}], back
        assert set(back["restored"]) >= {"x", "inc", "math", "p", "Point", "socket"}, back
        assert set(back["lost"]) == {"sock", "gen"}, back
        listed = client.get(f"/v1/sessions/{session}/kernels").json()
        assert [k["state"] for k in listed] == ["running"]
        again = execute(client, session, "x")  # restored once, not at every execute
        assert again["restored"] == [] and again["lost"] == []


def test_saved_kernels_survive_a_restart(tmp_path: Path) -> None:
    server = start_server(tmp_path, extra_env=IDLE, ready_s=180)
    try:
        _, token = server.tenant_with_user()
        with server.client(token) as client:
            session = client.post("/v1/sessions", json={}).json()["id"]
            execute(client, session, "kept = [1, 2, 3]")
            wait_saved(client, session)
    finally:
        stop_server(server)
    server = start_server(tmp_path, extra_env=IDLE, ready_s=180)
    try:
        with server.client(token) as client:
            assert [k["state"] for k in
                    client.get(f"/v1/sessions/{session}/kernels").json()] == ["saved"]
            back = execute(client, session, "sum(kept)")
            assert back["results"] == [{"text/plain": "6"}] and back["restored"] == ["kept"]
    finally:
        stop_server(server)


def test_a_running_kernel_is_saved_when_the_server_stops(tmp_path: Path) -> None:
    server = start_server(tmp_path, ready_s=180)  # default idle: running at the stop
    try:
        _, token = server.tenant_with_user()
        with server.client(token) as client:
            session = client.post("/v1/sessions", json={}).json()["id"]
            execute(client, session, "kept = 'across'")
    finally:
        stop_server(server)
    server = start_server(tmp_path, ready_s=180)
    try:
        with server.client(token) as client:
            back = execute(client, session, "kept")
            assert back["results"] == [{"text/plain": "'across'"}], back
    finally:
        stop_server(server)


def test_a_kernel_keeps_its_names_when_the_server_is_killed(tmp_path: Path) -> None:
    server = start_server(tmp_path, ready_s=180)
    try:
        _, token = server.tenant_with_user()
        with server.client(token) as client:
            session = client.post("/v1/sessions", json={}).json()["id"]
            execute(client, session, "kept = 'through kill -9'")
        server.process.send_signal(signal.SIGKILL)  # nothing saved by the server
        server.process.wait(timeout=10)
    finally:
        stop_server(server)
    server = start_server(tmp_path, ready_s=180)
    try:
        with server.client(token) as client:
            listed = client.get(f"/v1/sessions/{session}/kernels").json()
            assert [(k["name"], k["state"]) for k in listed] == [("default", "saved")], listed
            back = execute(client, session, "kept")
            assert back["error"] is None and back["restored"] == ["kept"], back
            assert back["results"] == [{"text/plain": "'through kill -9'"}], back
    finally:
        stop_server(server)


class Payload:
    """Unpickling runs `exec(CODE)`: where it runs is what the test looks at."""

    CODE = ""

    def __reduce__(self) -> tuple[Any, ...]:
        return (exec, (self.CODE,))


def test_saved_state_is_unpickled_only_in_the_sandbox(server: Server) -> None:
    tenant, token = server.tenant_with_user()
    host_marker = server.data_dir / "unpickled-on-the-host"
    with server.client(token) as client:
        session = client.post("/v1/sessions", json={}).json()["id"]
        execute(client, session, "x = 1")
        wait_saved(client, session)
        session_dir = server.data_dir / "workspaces" / tenant / session
        state = session_dir / "kernels" / "default" / "state.pkl"
        assert state.is_file()
        Payload.CODE = (
            "import json, os, socket\n"
            f"try:\n    open({str(host_marker)!r}, 'w').write('host')\nexcept OSError:\n    pass\n"
            "open('/workspace/unpickled.json', 'w').write(json.dumps("
            "[os.getuid(), socket.gethostname(), sorted(os.listdir('/sys/class/net'))]))\n")
        state.write_bytes(pickle.dumps(Payload()))
        # listing saved kernels reads no pickle
        assert [k["state"] for k in client.get(f"/v1/sessions/{session}/kernels").json()] == [
            "saved"]
        assert not (session_dir / "workspace" / "unpickled.json").exists()
        out = execute(client, session, "1 + 1")  # the restore runs the payload, in the sandbox
        assert out["results"] == [{"text/plain": "2"}]
        assert out["restored"] == [] and "x" in out["lost"], out
        ran = json.loads((session_dir / "workspace" / "unpickled.json").read_text())
    uid, hostname, interfaces = ran
    assert uid != 0 and uid != os.getuid() and hostname == "sandbox" and interfaces == ["lo"]
    assert not host_marker.exists()


def test_saved_state_is_part_of_snapshots(server: Server) -> None:
    _, token = server.tenant_with_user()
    with server.client(token) as client:
        session = client.post("/v1/sessions", json={}).json()["id"]
        execute(client, session, "kept = 'in the snapshot'")
        wait_saved(client, session)
        snap = client.post(f"/v1/sessions/{session}/snapshots", json={})
        assert snap.status_code == 201, snap.text
        assert client.delete(f"/v1/sessions/{session}/kernels/default").status_code == 204
        assert client.get(f"/v1/sessions/{session}/kernels").json() == []
        restored = client.post(f"/v1/sessions/{session}/snapshots/{snap.json()['id']}/restore")
        assert restored.status_code == 200, restored.text
        assert [k["state"] for k in client.get(f"/v1/sessions/{session}/kernels").json()] == [
            "saved"]
        back = execute(client, session, "kept")
        assert back["results"] == [{"text/plain": "'in the snapshot'"}], back
