"""Sessions at rest cost nothing (docs/sessions.md), against a real `navi serve` with real
containers and loop mounts: a tenant with the default quotas keeps 100 sessions and runs calls
in them, the mounts follow the active sessions, calls arriving as their session is released
work, kill -9 leaves no mount, and only sessions in use holding the quota make a 429."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from runtime.sandbox.instance import load_instance_id
from runtime.workspace.mount_table import mounts_under
from tests.e2e.conftest import ROOT, Server, start_server, stop_server

pytestmark = pytest.mark.docker

IDLE_S = "1"
STRICT = {"NAVI_DISK_OVERCOMMIT": "1", "NAVI_SESSION_IDLE_S": IDLE_S}


def session_mounts(server: Server) -> list[str]:
    return [p for p in mounts_under(server.data_dir) if Path(p).name.startswith("s_")]


def loop_devices(server: Server) -> list[str]:
    listed = subprocess.run(["losetup", "-l", "-n", "-O", "BACK-FILE"], capture_output=True,
                            text=True, check=True).stdout.split()
    return [f for f in listed if f.startswith(str(server.data_dir))]


def run(client: httpx.Client, session: str, command: str) -> httpx.Response:
    return client.post(f"/v1/sessions/{session}/exec",
                       json={"tool": "terminal", "args": {"command": command}}, timeout=120)


def running(client: httpx.Client, session: str) -> bool:
    """The call's command has started: it touched `started` first (a call on the tenant's
    warm pool runs in a container labelled before the call, so labels cannot tell)."""
    return client.get(f"/v1/sessions/{session}/files/started").status_code == 200


def state(client: httpx.Client, session: str) -> str:
    return str(client.get(f"/v1/sessions/{session}").json()["state"])


CALLED = 60  # the default execs_per_minute: a 61st call would only wait out the minute


def test_default_quotas_hold_100_sessions_with_calls_in_60(tmp_path: Path) -> None:
    """The default policy (1 GiB sessions, 10 GiB per tenant, 100 sessions) with no
    overcommit: all 100 made (each mounted when made), a call in 60 of them (mounted again,
    six times what the tenant's 10 GiB holds at once), never more than ten disks mounted."""
    srv = start_server(tmp_path, ROOT / "policies" / "default.yaml", extra_env=STRICT)
    stop = threading.Event()
    try:
        _, token = srv.tenant_with_user()
        peak = 0

        def watch() -> None:
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, len(session_mounts(srv)))
                time.sleep(0.05)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        started = time.monotonic()
        with srv.client(token) as client:
            sessions = []
            for _ in range(100):
                resp = client.post("/v1/sessions", json={})
                assert resp.status_code == 201, resp.text
                sessions.append(resp.json()["id"])

            def call(session: str) -> str:
                while True:  # the default execs_per_minute (60) holds too: wait as told
                    resp = run(client, session, f"echo {session} > mine; cat mine")
                    if resp.status_code != 429 or \
                            resp.json()["error"].get("quota") != "execs_per_minute":
                        break
                    time.sleep(int(resp.headers["Retry-After"]))
                assert resp.status_code == 200, resp.text
                return str(resp.json()["stdout"])

            with ThreadPoolExecutor(4) as pool:
                assert list(pool.map(call, sessions[:CALLED])) == [
                    f"{s}\n" for s in sessions[:CALLED]]
            elapsed = time.monotonic() - started
            assert client.post("/v1/sessions", json={}).status_code == 429  # the 101st: count
            stop.set()
            watcher.join()
            assert 1 <= peak <= 10, peak  # 10 GiB of 1 GiB disks, less what idle ones hold
            deadline = time.monotonic() + 30  # a loop device goes once the last container
            while (session_mounts(srv) or loop_devices(srv)) and \
                    time.monotonic() < deadline:  # that saw its mount is torn down (slow when busy)
                time.sleep(0.2)
            assert session_mounts(srv) == [] and loop_devices(srv) == []  # all idle now
            assert {state(client, s) for s in sessions} == {"idle"}
            # their files are kept: the first one, mounted again
            assert client.get(f"/v1/sessions/{sessions[0]}/files/mine").text == \
                f"{sessions[0]}\n"
            assert state(client, sessions[0]) == "active"
        print(f"100 sessions made, {CALLED} called in {elapsed:.1f} s; peak mounts {peak}")
    finally:
        stop.set()
        stop_server(srv)


def test_calls_arriving_as_their_session_is_released(tmp_path: Path) -> None:
    """Calls spaced around the idle time land before, during and after the release: each
    one works and sees the files of the last; then kill -9 leaves no mount or loop device."""
    srv = start_server(tmp_path, ROOT / "policies" / "default.yaml",
                       extra_env={**STRICT, "NAVI_SESSION_IDLE_S": "0.5"})
    session = ""
    try:
        _, token = srv.tenant_with_user()
        with srv.client(token) as client:
            session = client.post("/v1/sessions", json={}).json()["id"]
            states = set()
            for n in range(16):
                resp = run(client, session, f"cat n 2>/dev/null; echo {n} > n")
                assert resp.status_code == 200, resp.text
                assert resp.json()["stdout"] == ("" if n == 0 else f"{n - 1}\n")
                time.sleep(0.4 + 0.05 * n)  # 0.4 .. 1.15 s: across the release
                states.add(state(client, session))
            assert states == {"active", "idle"}
            assert run(client, session, "true").status_code == 200
            assert session_mounts(srv) and loop_devices(srv)
        srv.process.send_signal(signal.SIGKILL)
        srv.process.wait()
        deadline = time.monotonic() + 10
        while (mounts_under(srv.data_dir) or loop_devices(srv)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert mounts_under(srv.data_dir) == [] and loop_devices(srv) == []  # the guard
    finally:
        stop_server(srv)
        remove_containers(srv.data_dir)  # a warm refill the kill -9 caught half made


def remove_containers(data_dir: Path) -> None:
    """The containers a killed server left (the next server on its data dir would reap them;
    this test starts none): all of its instance's, pooled ones too (they carry no session)."""
    instance = load_instance_id(data_dir)
    found = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=navi.instance={instance}"],
                           capture_output=True, text=True, check=False).stdout.split()
    if found:
        subprocess.run(["docker", "rm", "-f", *found], capture_output=True, check=False)


def test_429_only_when_sessions_in_use_hold_the_quota(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text((ROOT / "policies" / "default.yaml").read_text()
                      .replace("    session_disk_mb: 1024", "    session_disk_mb: 32")
                      .replace("    tenant_disk_mb: 10240", "    tenant_disk_mb: 64"))
    assert "session_disk_mb: 32" in policy.read_text()
    srv = start_server(tmp_path, policy, extra_env={**STRICT, "NAVI_SESSION_IDLE_S": "600"})
    try:
        _, token = srv.tenant_with_user()
        with srv.client(token) as client:
            two = [client.post("/v1/sessions", json={}).json()["id"] for _ in range(2)]
            with ThreadPoolExecutor(2) as pool:
                busy = [pool.submit(run, client, s, "touch started; sleep 4") for s in two]
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and not all(running(client, s) for s in two):
                    time.sleep(0.2)
                time.sleep(1)
                resp = client.post("/v1/sessions", json={})
                assert resp.status_code == 429, resp.text
                assert resp.json()["error"]["code"] == "disk_quota"
                assert int(resp.headers["Retry-After"]) > 0
                assert all(f.result().status_code == 200 for f in busy)
            third = client.post("/v1/sessions", json={})  # now one is released for it
            assert third.status_code == 201, third.text
            assert "idle" in {state(client, s) for s in two}
            assert state(client, third.json()["id"]) == "active"
    finally:
        stop_server(srv)
