"""Background processes behind a real `navi serve`: each in a hardened container of its own,
output as a log with offsets and as live events, stdin, signals, stop, the monitor, limits,
audit, and what ends them (session delete, lifetime, token revocation, OOM)."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest

from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.sse import frames

pytestmark = pytest.mark.docker
POLICY = Path(__file__).resolve().parents[1] / "e2e" / "policies" / "processes.yaml"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("processes"), policy=POLICY, ready_s=120)
    yield srv
    stop_server(srv)


def wait_for(check: Callable[[], Any], within_s: float = 30, what: str = "") -> Any:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"not within {within_s} s: {what}")


def session_of(client: httpx.Client, profile: str | None = None) -> str:
    resp = client.post("/v1/sessions", json={"profile": profile} if profile else {})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


def start(client: httpx.Client, session: str, command: str, **body: Any) -> dict[str, Any]:
    resp = client.post(f"/v1/sessions/{session}/processes", json={"command": command, **body})
    assert resp.status_code == 201, resp.text
    return dict(resp.json())


def output(client: httpx.Client, session: str, pid: str, since: int = 0) -> dict[str, Any]:
    resp = client.get(f"/v1/sessions/{session}/processes/{pid}/output",
                      params={"since": since})
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def info(client: httpx.Client, session: str, pid: str) -> dict[str, Any]:
    resp = client.get(f"/v1/sessions/{session}/processes/{pid}")
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def ended(client: httpx.Client, session: str, pid: str, within_s: float = 30
          ) -> dict[str, Any]:
    return dict(wait_for(lambda: (p := info(client, session, pid))["state"] == "exited"
                         and p, within_s, f"{pid} to end"))


def containers_of(api: docker.APIClient, pid: str) -> list[dict[str, Any]]:
    return list(api.containers(all=True, filters={"label": f"navi.process={pid}"}))


def watch(server: Server, token: str, session: str, into: list[dict[str, Any]]
          ) -> threading.Event:
    """Collect the session's events on a thread until the returned event is set."""
    stop = threading.Event()

    def read() -> None:
        with server.client(token) as client, client.stream(
                "GET", f"/v1/sessions/{session}/events", timeout=60) as resp:
            for _id, event in frames(resp):
                into.append(event)
                if stop.is_set():
                    return

    threading.Thread(target=read, daemon=True).start()
    time.sleep(0.5)
    return stop


def test_a_process_runs_on_takes_input_and_signals_and_is_audited(
        server: Server, docker_api: docker.APIClient) -> None:
    tenant, token = server.tenant_with_user()
    command = 'echo ready; while read line; do echo "got $line"; done'
    with server.client(token) as client:
        session = session_of(client)
        events: list[dict[str, Any]] = []
        stop_watching = watch(server, token, session, events)
        proc = start(client, session, command, name="echoer", ports=[8123])
        pid = proc["id"]
        assert pid.startswith("p_") and proc["state"] == "running"
        assert proc | {"started_at": 0} == {
            "id": pid, "name": "echoer", "command": command, "cwd": "/workspace",
            "state": "running", "exit_code": None, "reason": None, "started_at": 0,
            "ended_at": None, "ports": [8123], "node": "local", "runtime": "runc",
            "kind": "command"}
        [container] = containers_of(docker_api, pid)
        assert container["State"] == "running"
        assert "ready" in wait_for(lambda: output(client, session, pid)["output"])
        # the same port declared by another running process of the session: 409
        clash = client.post(f"/v1/sessions/{session}/processes",
                            json={"command": "sleep 5", "ports": [8123]})
        assert clash.status_code == 409 and clash.json()["error"]["code"] == "port_in_use"
        sent = client.post(f"/v1/sessions/{session}/processes/{pid}/input",
                           json={"data": "hello\n"})
        assert sent.status_code == 204
        got = wait_for(lambda: "got hello" in (o := output(client, session, pid))["output"]
                       and o)
        assert got["state"] == "running" and got["next"] == len(got["output"].encode())
        assert output(client, session, pid, since=got["next"])["output"] == ""
        listed = client.get(f"/v1/sessions/{session}/processes").json()
        assert [p["id"] for p in listed] == [pid]
        reader = start(client, session, "cat; echo cat-ended-$?")["id"]
        assert client.post(f"/v1/sessions/{session}/processes/{reader}/input",
                           json={"data": "last words\n", "eof": True}).status_code == 204
        assert ended(client, session, reader)["exit_code"] == 0  # cat read EOF
        assert output(client, session, reader)["output"] == "last words\ncat-ended-0\n"
        signal = client.post(f"/v1/sessions/{session}/processes/{pid}/signal",
                             json={"signal": "KILL"})
        assert signal.status_code == 204
        done = ended(client, session, pid)
        assert done["reason"] == "exited" and done["exit_code"] == 137
        wait_for(lambda: not containers_of(docker_api, pid), what="its container removed")
        wait_for(lambda: any(e["type"] == "process_exited" and e["process_id"] == pid
                             for e in events), 10)
        stop_watching.set()
    kinds = [e["type"] for e in events if e["type"].startswith("process_")]
    assert kinds[0] == "process_started" and kinds[-1] == "process_exited"
    live = "".join(e["data"] for e in events if e["type"] == "process_output")
    assert "ready" in live and "got hello" in live
    exited = [e for e in events if e["type"] == "process_exited" and e["process_id"] == pid][0]
    assert exited == exited | {"process_id": pid, "exit_code": 137, "reason": "exited"}
    with server.client(server.token_for(tenant, "auditor")) as auditor:
        records = auditor.get("/v1/audit", params={"session": session}).json()
    mine = {r["action"]: r for r in records if r.get("object") == pid}
    assert set(mine) == {"process.start", "process.input", "process.signal", "process.exit"}
    assert mine["process.start"]["args_sha256"] == hashlib.sha256(command.encode()).hexdigest()
    assert mine["process.start"]["rule"] == "profiles.developer.allow[group:exec]"
    assert "ports [8123]" in mine["process.start"]["detail"]
    assert mine["process.input"]["stdin_sha256"] == hashlib.sha256(b"hello\n").hexdigest()
    assert mine["process.exit"]["exit_code"] == 137
    assert mine["process.start"]["seq"] < mine["process.exit"]["seq"]


def test_stop_wait_and_limits(server: Server, docker_api: docker.APIClient) -> None:
    tenant, token = server.tenant_with_user()
    with server.client(token) as client:
        session = session_of(client)
        first = start(client, session, "trap 'echo bye; exit 3' TERM; echo up; "
                      "while true; do sleep 0.1; done")
        second = start(client, session, "sleep 600", cwd="/tmp")
        over = client.post(f"/v1/sessions/{session}/processes", json={"command": "true"})
        assert over.status_code == 429 and over.headers["Retry-After"]
        assert over.json()["error"]["code"] == "quota_exceeded"
        assert over.json()["error"]["quota"] == "max_per_session"
        other = session_of(client)
        start(client, other, "sleep 600")
        tenant_over = client.post(f"/v1/sessions/{other}/processes", json={"command": "true"})
        assert tenant_over.status_code == 429
        assert tenant_over.json()["error"]["quota"] == "processes_per_tenant"
        wait_for(lambda: "up" in output(client, session, first["id"])["output"])
        began = time.monotonic()
        assert client.delete(f"/v1/sessions/{session}/processes/{first['id']}"
                             ).status_code == 204
        assert time.monotonic() - began < 5
        stopped = info(client, session, first["id"])
        assert (stopped["state"], stopped["reason"], stopped["exit_code"]) == \
            ("exited", "stopped", 3)
        assert "bye" in output(client, session, first["id"])["output"]
        # a place is free again; ending the session stops the rest
        start(client, session, "sleep 600")
        assert client.delete(f"/v1/sessions/{other}").status_code == 204
        assert client.delete(f"/v1/sessions/{session}").status_code == 204
        assert not containers_of(docker_api, second["id"])
        nothing = client.get(f"/v1/sessions/{session}/processes")
        assert nothing.status_code == 404
    with server.client(server.token_for(tenant, "auditor")) as auditor:
        records = auditor.get("/v1/audit", params={"session": session}).json()
    exits = [r for r in records if r["action"] == "process.exit"]
    assert any(r["detail"] == "reason session_ended" for r in exits)
    refused = [r for r in records if r["kind"] == "denied"]
    assert refused and refused[0]["rule"] == "limits.processes.max_per_session"


def test_bad_requests_are_4xx(server: Server) -> None:
    _, token = server.tenant_with_user()
    _, stranger = server.tenant_with_user()
    with server.client(token) as client:
        session = session_of(client)
        base = f"/v1/sessions/{session}/processes"
        for body in ({"command": ""}, {"command": "x", "cwd": "/etc"},
                     {"command": "x", "cwd": "../up"}, {"command": "x", "ports": [80]},
                     {"command": "x", "ports": [2000, 2000]}, {"command": "x", "nope": 1},
                     {"command": "x", "env": {"PATH": "/evil"}}):
            resp = client.post(base, json=body)
            assert resp.status_code in (400, 422), (body, resp.text)
        assert client.get(f"{base}/p_0000000000000000").status_code == 404
        assert client.get(f"{base}/../../x").status_code == 404
        pid = start(client, session, "sleep 30")["id"]
        assert client.post(f"{base}/{pid}/signal", json={"signal": "STOP"}).status_code == 422
        assert client.get(f"{base}/{pid}/output", params={"since": -1}).status_code == 422
        with server.client(stranger) as other:
            assert other.get(f"{base}/{pid}").status_code == 404
        noports = session_of(client, "noports")
        refused = client.post(f"/v1/sessions/{noports}/processes",
                              json={"command": "sleep 1", "ports": [3000]})
        assert refused.status_code == 403
        assert refused.json()["error"]["rule"] == "default.limits.ports"
        assert client.delete(f"{base}/{pid}").status_code == 204
        done = info(client, session, pid)
        assert client.delete(f"{base}/{pid}").status_code == 204  # already ended: no-op
        assert client.post(f"{base}/{pid}/input", json={"data": "x"}).status_code == 409
        assert done["reason"] == "stopped"


def test_the_monitor_waits_for_a_line_through_the_tools(server: Server) -> None:
    _, token = server.tenant_with_user()
    with server.client(token) as client:
        session = session_of(client)

        def tool(name: str, **args: Any) -> dict[str, Any]:
            resp = client.post(f"/v1/sessions/{session}/exec",
                               json={"tool": name, "args": args})
            assert resp.status_code == 200, resp.text
            return dict(resp.json())

        started = tool("terminal", command="sleep 1; echo 'server listening on 8000'; "
                       "sleep 600", background=True)
        pid = started["metadata"]["process"]["id"]
        waited = tool("process_wait", process_id=pid, pattern=r"listening on \d+",
                      timeout_s=30)
        assert waited["metadata"]["wait"]["matched"] and "listening on 8000" in waited["output"]
        timed = tool("process_wait", process_id=pid, pattern="never", timeout_s=1)
        assert timed["metadata"]["wait"]["timed_out"]
        assert not timed["metadata"]["wait"]["matched"]
        assert pid in tool("process_list")["output"]
        assert "listening" in tool("process_output", process_id=pid)["output"]
        stopped = tool("process_stop", process_id=pid)
        assert "stopped" in stopped["output"]
        quick = tool("process_start", command="exit 7")["metadata"]["process"]["id"]
        exited = tool("process_wait", process_id=quick, timeout_s=30)
        assert exited["metadata"]["wait"]["exited"]
        assert exited["metadata"]["wait"]["process"]["exit_code"] == 7


def test_lifetime_revocation_and_restore_end_or_refuse(server: Server) -> None:
    tenant, token = server.tenant_with_user()
    with server.client(token) as client:
        short = session_of(client, "short")
        pid = start(client, short, "sleep 600")["id"]
        done = ended(client, short, pid, within_s=20)
        assert done["reason"] == "lifetime"
    with server.client(server.admin_token) as admin:
        made = admin.post(f"/v1/tenants/{tenant}/tokens", json={"role": "user"}).json()
    with server.client(made["token"]) as client:
        session = session_of(client)
        snap = client.post(f"/v1/sessions/{session}/snapshots", json={})
        pid = start(client, session, "sleep 600")["id"]
        if snap.status_code == 201:  # session disks: a restore while it runs is refused
            busy = client.post(f"/v1/sessions/{session}/snapshots/{snap.json()['id']}"
                               "/restore")
            assert busy.status_code == 409 and busy.json()["error"]["code"] == "session_busy"
        with server.client(server.admin_token) as admin:
            assert admin.delete(f"/v1/tenants/{tenant}/tokens/{made['id']}"
                                ).status_code == 204
        revoked_at = time.monotonic()
    with server.client(token) as client:
        done = ended(client, session, pid, within_s=15)
        assert done["reason"] == "revoked"
        assert time.monotonic() - revoked_at < 10
        oom = start(client, session, "python3 -c 'x = bytearray(2 * 1024**3)'")["id"]
        assert ended(client, session, oom)["reason"] == "oom"
