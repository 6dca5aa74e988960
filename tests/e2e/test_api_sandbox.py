"""The API with real containers: the new-user tour, files made by sandboxed code, live output,
approvals, quotas, and SIGTERM with an execution in flight."""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.sse import frames

pytestmark = pytest.mark.docker
POLICIES = Path(__file__).parent / "policies"


@pytest.fixture(scope="module")
def tenant_and_user(server: Server) -> tuple[str, str]:
    return server.tenant_with_user()


@pytest.fixture(scope="module")
def user(tenant_and_user: tuple[str, str]) -> str:
    return tenant_and_user[1]


def _session(server: Server, token: str) -> str:
    with server.client(token) as client:
        return str(client.post("/v1/sessions", json={}).json()["id"])


def _exec(server: Server, token: str, session: str, tool: str, args: dict, **kw: object):  # noqa: ANN202
    with server.client(token) as client:
        return client.post(f"/v1/sessions/{session}/exec", json={"tool": tool, "args": args, **kw})


def _py(server: Server, token: str, session: str, code: str) -> dict:
    resp = _exec(server, token, session, "code_exec", {"language": "python", "code": code})
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_tour_upload_run_download_audit(server: Server, user: str) -> None:
    session = _session(server, user)
    with server.client(user) as client:
        put = client.put(f"/v1/sessions/{session}/files/data/in.txt", content=b"3\n4\n")
        assert put.status_code == 201 and put.json()["size"] == 4
    out = _py(server, user, session,
              "n=[int(x) for x in open('data/in.txt')]\nopen('sum.txt','w').write(str(sum(n)))\n"
              "print('sum', sum(n))")
    assert out["ok"] is True and out["exit_code"] == 0 and out["stdout"] == "sum 7\n"
    assert out["exec_id"].startswith("ex_") and isinstance(out["audit_seq"], int)
    for field in ("stderr", "timed_out", "oom_killed", "truncated", "duration_ms"):
        assert field in out
    with server.client(user) as client:
        assert client.get(f"/v1/sessions/{session}/files/sum.txt").content == b"7"
        listing = {e["path"] for e in client.get(f"/v1/sessions/{session}/files").json()}
        assert {"data/in.txt", "sum.txt"} <= listing
    with server.client(server.admin_token) as admin:
        verify = admin.get("/v1/audit/verify").json()
    assert verify["ok"] is True and verify["records"] >= 2 and verify["first_bad_seq"] is None


def test_failing_program_is_200_not_ok(server: Server, user: str) -> None:
    session = _session(server, user)
    out = _py(server, user, session, "import sys; print('bad', file=sys.stderr); sys.exit(3)")
    assert out["ok"] is False and out["exit_code"] == 3 and out["stderr"] == "bad\n"


def test_timeout_is_clamped_and_reported(server: Server, user: str) -> None:
    session = _session(server, user)
    resp = _exec(server, user, session, "code_exec",
                 {"language": "python", "code": "import time; time.sleep(30)"}, timeout_s=1)
    out = resp.json()
    assert out["timed_out"] is True and out["ok"] is False and out["timeout_s"] == 1
    big = _exec(server, user, session, "code_exec", {"language": "python", "code": "print(1)"},
                timeout_s=100000).json()
    assert big["ok"] is True and big["timeout_s"] == 300


def test_denied_tool_is_403_with_rule_and_audited(server: Server,
                                                   tenant_and_user: tuple[str, str]) -> None:
    tenant, user = tenant_and_user
    session = _session(server, user)
    resp = _exec(server, user, session, "code_exec", {"language": "bash", "code": "true"})
    assert resp.status_code == 200  # bash is allowed for developer
    with server.client(user) as client:
        sec = client.post("/v1/sessions", json={"profile": "secretary"}).json()["id"]
        denied = client.post(f"/v1/sessions/{sec}/exec",
                             json={"tool": "code_exec", "args": {"language": "python",
                                                                 "code": "print(1)"}})
    assert denied.status_code == 403
    error = denied.json()["error"]
    assert error["code"] == "policy_denied" and error["rule"].startswith("profiles.secretary")
    with server.client(server.admin_token) as admin:
        assert admin.get("/v1/audit", params={"session": sec}).json() == []  # own tenant only
    with server.client(server.token_for(tenant, "auditor")) as auditor:
        records = auditor.get("/v1/audit", params={"session": sec}).json()
    assert [(r["kind"], r["action"], r["decision"]) for r in records] == [
        ("action", "session.create", "allow"), ("denied", "exec", "deny")]
    assert records[0]["rule"] == "profiles.secretary.roles" and records[0]["object"] == sec
    assert records[1]["rule"] == error["rule"] and records[1]["exit_code"] is None


SANDBOX_TRAPS = """
import os
os.symlink('/etc/passwd', 'passwd_link')
os.symlink('/etc', 'etc_dir')
os.mkdir('d'); open('d/real.txt', 'w').write('ok')
os.symlink('/etc', 'd/up')
os.mkfifo('fifo')
open('plain.txt', 'w').write('plain')
os.link('plain.txt', 'hard.txt')
print('planted')
"""


@pytest.mark.parametrize("path", ["passwd_link", "etc_dir/passwd", "d/up/passwd", "fifo",
                                  "hard.txt", "plain.txt"])
def test_files_planted_by_sandbox_never_reach_host_files(server: Server, user: str,
                                                         path: str) -> None:
    session = _session(server, user)
    assert _py(server, user, session, SANDBOX_TRAPS)["stdout"] == "planted\n"
    with server.client(user) as client:
        resp = client.get(f"/v1/sessions/{session}/files/{path}", timeout=10)
        assert b"root:" not in resp.content
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"]["code"] == "invalid_path"
        overwrite = client.put(f"/v1/sessions/{session}/files/{path}", content=b"x", timeout=10)
        assert overwrite.status_code == 400
        listing = {e["path"] for e in client.get(f"/v1/sessions/{session}/files").json()}
    assert "d/real.txt" in listing and not listing & {"passwd_link", "fifo", "etc_dir"}
    assert Path("/etc/passwd").read_bytes().startswith(b"root:")


@pytest.mark.parametrize("raw", ["..%2f..%2f..%2fetc%2fpasswd", "%2e%2e/%2e%2e/etc/passwd",
                                 "%252e%252e%252fetc%252fpasswd", "a%00b", "%2fetc%2fpasswd",
                                 "..\\..\\etc\\passwd"])
def test_encoded_traversal_is_400(server: Server, user: str, raw: str) -> None:
    session = _session(server, user)
    host, port = server.url.removeprefix("http://").split(":")
    request = (f"GET /v1/sessions/{session}/files/{raw} HTTP/1.1\r\nHost: {host}\r\n"
               f"Authorization: Bearer {user}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    status = int(answer.split(b" ", 2)[1])
    assert status in (400, 404), answer[:300]
    assert b"root:" not in answer


def test_upload_over_limit_is_413_before_body(server: Server, user: str) -> None:
    session = _session(server, user)
    host, port = server.url.removeprefix("http://").split(":")
    head = (f"PUT /v1/sessions/{session}/files/big.bin HTTP/1.1\r\nHost: {host}\r\n"
            f"Authorization: Bearer {user}\r\nContent-Type: application/octet-stream\r\n"
            f"Content-Length: {200 * 1024 * 1024}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head + b"x" * 1024)
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


def test_exec_output_streams_live_over_sse(server: Server, user: str) -> None:
    session = _session(server, user)
    with server.client(user) as client, client.stream(
        "POST", f"/v1/sessions/{session}/exec", params={"stream": "true"}, timeout=30,
        json={"tool": "terminal",
              "args": {"command": "for i in 1 2 3; do echo tick $i; sleep 0.3; done"}},
    ) as resp:
        assert resp.status_code == 200
        seen = []
        for event_id, data in frames(resp):
            seen.append((time.monotonic(), event_id, data))
    types = [d["type"] for _, _, d in seen]
    assert types[0] == "tool_call" and types[-1] == "tool_result"
    outputs = [(t, d) for t, _, d in seen if d["type"] == "exec_output"]
    assert "".join(d["data"] for _, d in outputs) == "tick 1\ntick 2\ntick 3\n"
    assert len(outputs) >= 2 and outputs[-1][0] - outputs[0][0] > 0.3  # arrived while running
    ids = [i for _, i, _ in seen]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert seen[-1][2]["ok"] is True and seen[-1][2]["exit_code"] == 0


@pytest.fixture(scope="module")
def ask_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("ask"), policy=POLICIES / "ask_and_quota.yaml")
    yield srv
    stop_server(srv)


def _approve_when_asked(server: Server, token: str, decision: str) -> threading.Thread:
    def run() -> None:
        with server.client(token) as client:
            for _ in range(100):
                pending = client.get("/v1/approvals").json()
                if pending:
                    client.post(f"/v1/approvals/{pending[0]['id']}", json={"decision": decision})
                    return
                time.sleep(0.1)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_ask_waits_for_a_human(ask_server: Server, decision: str) -> None:
    tenant, token = ask_server.tenant_with_user()
    session = _session(ask_server, token)
    thread = _approve_when_asked(ask_server, token, decision)
    resp = _exec(ask_server, token, session, "terminal", {"command": "echo approved-run"})
    thread.join()
    if decision == "approve":
        assert resp.status_code == 200 and resp.json()["stdout"] == "approved-run\n"
    else:
        assert resp.status_code == 403 and resp.json()["error"]["code"] == "policy_denied"
    with ask_server.client(ask_server.token_for(tenant, "auditor")) as auditor:
        kinds = [r["kind"] for r in auditor.get("/v1/audit", params={"session": session}).json()]
    assert "approval" in kinds


def test_quota_burst_gets_429_with_retry_after(ask_server: Server) -> None:
    _, token = ask_server.tenant_with_user()
    session = _session(ask_server, token)
    statuses, retry = [], []
    for _ in range(8):  # the policy allows 6 per minute
        resp = _exec(ask_server, token, session, "code_exec",
                     {"language": "python", "code": "print(1)"})
        statuses.append(resp.status_code)
        if resp.status_code == 429:
            retry.append(resp.headers.get("retry-after"))
            assert resp.json()["error"]["code"] == "quota_exceeded"
    assert statuses[:6] == [200] * 6 and statuses[6:] == [429, 429]
    assert all(r is not None and int(r) >= 1 for r in retry)


def _started(srv: Server, token: str, session: str, name: str = "started") -> bool:
    with srv.client(token) as client:
        return client.get(f"/v1/sessions/{session}/files/{name}").status_code == 200


def test_sigterm_kills_running_execution_and_audits_it(tmp_path: Path) -> None:
    srv = start_server(tmp_path)
    try:
        tenant, token = srv.tenant_with_user()
        session = _session(srv, token)
        result: dict = {}

        def long_call() -> None:
            try:
                resp = _exec(srv, token, session, "code_exec",
                             {"language": "python", "code":
                              "open('started', 'w').close()\nimport time; time.sleep(60)"})
                result["status"] = resp.status_code
            except Exception as exc:  # the connection may be cut
                result["error"] = repr(exc)

        thread = threading.Thread(target=long_call)
        thread.start()
        client = docker.from_env()
        # a call on the tenant's warm pool runs in a container labelled before the call was
        # known (navi.session=""): the file its code writes first says it runs
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not _started(srv, token, session):
            time.sleep(0.1)
        assert _started(srv, token, session)
        assert client.containers.list(filters={"label": f"navi.tenant={tenant}"})
        started = time.monotonic()
        srv.process.send_signal(signal.SIGTERM)
        srv.process.wait(timeout=30)
        assert time.monotonic() - started < 15
        thread.join(timeout=30)
        assert client.containers.list(all=True, filters={"label": f"navi.tenant={tenant}"}) == []
        client.close()
    finally:
        stop_server(srv)
    restarted = start_server(tmp_path)
    try:
        with restarted.client(restarted.admin_token) as admin:
            assert admin.get("/v1/audit/verify").json()["ok"] is True
        import sqlite3

        db = sqlite3.connect(restarted.data_dir / "audit.sqlite3")
        kinds = [k for (k,) in db.execute(
            "SELECT kind FROM audit WHERE session = ? AND kind != 'action' ORDER BY seq",
            (session,))]
        db.close()
        assert kinds[0] == "intent" and kinds[-1] in ("outcome", "interrupted")
    finally:
        stop_server(restarted)
