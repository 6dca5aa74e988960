"""Found by trying the served API from outside, as a newcomer and as an attacker (the
control API, docs/api.md); each test failed before its fix. None needs an engine:
the calls are refused before a container, or use tools that run none."""

from __future__ import annotations

import json
import threading

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.e2e.conftest import Server
from tests.e2e.sse import frames


@pytest.fixture(scope="module")
def tenant(server: Server) -> dict[str, str]:
    tenant_id, user = server.tenant_with_user()
    with server.client(user) as client:
        session = client.post("/v1/sessions", json={}).json()["id"]
    return {"id": tenant_id, "user": user, "session": session,
            "auditor": server.token_for(tenant_id, "auditor"),
            "tenant_admin": server.token_for(tenant_id, "tenant_admin")}


def _error(resp: httpx.Response, status: int, code: str) -> dict:
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert error["code"] == code and error["message"]
    return error


def test_huge_or_unicode_numbers_in_queries_are_client_errors(
        server: Server, tenant: dict[str, str]) -> None:
    """These were 500s: an int beyond SQLite's 64 bits, and `'²'.isdigit()` being true."""
    with server.client(tenant["auditor"]) as auditor:
        _error(auditor.get("/v1/audit", params={"since": "9" * 40}), 400, "invalid_input")
        _error(auditor.get("/v1/audit", params={"since": "²"}), 400, "invalid_input")
        assert auditor.get("/v1/audit", params={"since": "0"}).status_code == 200
    with server.client(tenant["user"]) as user:
        _error(user.get(f"/v1/sessions/{tenant['session']}/messages",
                        params={"after": "9" * 40}), 422, "invalid_request")


def test_unparseable_last_event_id_is_ignored_not_a_broken_stream(
        server: Server, tenant: dict[str, str]) -> None:
    """A Last-Event-ID of 5000 digits used to raise inside the open stream."""
    session = tenant["session"]
    timer = threading.Timer(0.5, lambda: _todo(server, tenant["user"], session, "after"))
    with server.client(tenant["user"]) as client, client.stream(
            "GET", f"/v1/sessions/{session}/events",
            headers={"Last-Event-ID": "9" * 5000}, timeout=10) as resp:
        assert resp.status_code == 200
        timer.start()
        try:
            first = next(frames(resp))
        finally:
            timer.cancel()
    assert first[1]["type"] == "tool_call" and first[1]["args"]["title"] == "after"


def _todo(server: Server, token: str, session: str, title: str) -> None:
    with server.client(token) as client:
        resp = client.post(f"/v1/sessions/{session}/exec",
                           json={"tool": "todo", "args": {"action": "add", "title": title}})
        assert resp.status_code == 200, resp.text


@pytest.mark.parametrize("tool", ["http_request", "web_view"])
def test_denied_web_tools_answer_403_with_the_rule_and_are_audited(
        server: Server, tenant: dict[str, str], tool: str) -> None:
    """group:web is denied by default, so a denial is always observable; these tools are not
    shipped, which used to answer 404 `no tool named ...` instead of the policy's 403."""
    with server.client(tenant["user"]) as user:
        resp = user.post(f"/v1/sessions/{tenant['session']}/exec",
                         json={"tool": tool, "args": {"url": "http://example.com"}})
        assert _error(resp, 403, "policy_denied")["rule"] == "profiles.developer.deny[group:web]"
        _error(user.post(f"/v1/sessions/{tenant['session']}/exec",
                         json={"tool": "no_such_tool", "args": {}}), 404, "not_found")
    with server.client(tenant["auditor"]) as auditor:
        records = auditor.get("/v1/audit", params={"tool": tool}).json()
    assert [(r["decision"], r["rule"]) for r in records] == [
        ("deny", "profiles.developer.deny[group:web]")]


def test_a_profile_the_role_may_not_use_is_refused_at_session_creation(
        server: Server, tenant: dict[str, str]) -> None:
    """`server_admin` is for the operator's admin tokens only; a user could create such a
    session (every call in it then failed), and every tenant was offered it."""
    with server.client(tenant["user"]) as user:
        error = _error(user.post("/v1/sessions", json={"profile": "server_admin"}), 403,
                       "forbidden")
        assert "server_admin" in error["message"]
        assert all(s["profile"] != "server_admin" for s in user.get("/v1/sessions").json())
    with server.client(tenant["tenant_admin"]) as boss:
        _error(boss.post("/v1/sessions", json={"profile": "server_admin"}), 403, "forbidden")
    with server.client(server.admin_token) as admin:
        assert admin.post("/v1/sessions", json={"profile": "server_admin"}).status_code == 201


def test_an_oversized_json_body_is_413_before_auth(server: Server,
                                                   tenant: dict[str, str]) -> None:
    """Without a cap FastAPI buffered any body, even one sent without a token."""
    big = b'{"tool": "todo", "args": {"x": "' + b"a" * (40 * 1024 * 1024) + b'"}}'
    with server.client() as anonymous:
        resp = anonymous.post(f"/v1/sessions/{tenant['session']}/exec", content=big,
                              headers={"content-type": "application/json"})
    _error(resp, 413, "too_large")
    chunks = iter([big[i:i + (1 << 20)] for i in range(0, len(big), 1 << 20)])
    with server.client(tenant["user"]) as user:  # no Content-Length: counted as it arrives
        resp = user.post(f"/v1/sessions/{tenant['session']}/exec", content=chunks,
                         headers={"content-type": "application/json"})
        _error(resp, 413, "too_large")
        # file uploads stream under their own (policy) limit and stay exempt
        upload = user.put(f"/v1/sessions/{tenant['session']}/files/big.bin",
                          content=b"\0" * (40 * 1024 * 1024))
        assert upload.status_code == 201, upload.text
        assert user.delete(f"/v1/sessions/{tenant['session']}/files/big.bin"
                           ).status_code == 204


def test_filesystem_list_of_dot_is_the_workspace(server: Server,
                                                 tenant: dict[str, str]) -> None:
    with server.client(tenant["user"]) as user:
        assert user.put(f"/v1/sessions/{tenant['session']}/files/dot.txt",
                        content=b"x").status_code == 201
        for path in (".", "./", ""):
            resp = user.post(f"/v1/sessions/{tenant['session']}/exec", json={
                "tool": "filesystem", "args": {"action": "list", "path": path}})
            assert resp.status_code == 200, resp.text
            assert "dot.txt" in resp.json()["stdout"]


def test_websocket_foreign_session_is_4404_and_a_bad_after_is_not_an_auth_failure(
        server: Server, tenant: dict[str, str]) -> None:
    other = server.tenant_with_user()[1]
    base = server.url.replace("http://", "ws://") + f"/v1/sessions/{tenant['session']}/ws"
    with connect(base, additional_headers={"Authorization": f"Bearer {other}"}) as ws:
        assert json.loads(ws.recv(timeout=5))["code"] == "not_found"
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=5)
        assert ws.close_code == 4404
    with connect(base + "?after=²",
                 additional_headers={"Authorization": f"Bearer {tenant['user']}"}) as ws:
        assert json.loads(ws.recv(timeout=5))["type"] == "ready"
