"""Auth matrix and tenant isolation against a real server: 401 / 403 / 404 on every route."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import Server

S = "s_0123456789abcdef"  # placeholder session id, replaced per test

USER_ROUTES = [
    ("POST", "/v1/sessions", {}),
    ("GET", "/v1/sessions", None),
    ("GET", "/v1/sessions/{s}", None),
    ("DELETE", "/v1/sessions/{s}", None),
    ("POST", "/v1/sessions/{s}/exec", {"tool": "todo", "args": {"action": "list"}}),
    ("GET", "/v1/sessions/{s}/files", None),
    ("GET", "/v1/sessions/{s}/files/a.txt", None),
    ("PUT", "/v1/sessions/{s}/files/a.txt", b"x"),
    ("DELETE", "/v1/sessions/{s}/files/a.txt", None),
    ("GET", "/v1/sessions/{s}/events", None),
    ("GET", "/v1/tools", None),
    ("GET", "/v1/tools/code_exec", None),
    ("GET", "/v1/manuals/code_exec", None),
    ("GET", "/v1/approvals", None),
    ("POST", "/v1/approvals/ap_0123456789abcdef", {"decision": "approve"}),
]
AUDIT_ROUTES = [("GET", "/v1/audit", None), ("GET", "/v1/audit/verify", None),
                ("GET", "/v1/metrics", None)]
ADMIN_ROUTES = [("POST", "/v1/tenants", {"name": "x"}),
                ("POST", "/v1/tenants/t_0123456789abcdef/tokens", {"role": "user"}),
                ("GET", "/v1/policies", None)]
ALL_ROUTES = USER_ROUTES + AUDIT_ROUTES + ADMIN_ROUTES


def _send(client, method: str, path: str, body: object):  # noqa: ANN001, ANN202
    if isinstance(body, bytes):
        return client.request(method, path, content=body,
                               headers={"content-type": "application/octet-stream"})
    return client.request(method, path, json=body) if body is not None else client.request(
        method, path)


def _assert_error(resp, status: int, code: str | None = None) -> None:  # noqa: ANN001
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert isinstance(error["message"], str) and error["message"]
    if code:
        assert error["code"] == code


@pytest.fixture(scope="module")
def tenants(server: Server) -> dict[str, str]:
    a_id, a_user = server.tenant_with_user()
    b_id, b_user = server.tenant_with_user()
    return {"a_user": a_user, "a_auditor": server.token_for(a_id, "auditor"),
            "b_user": b_user, "a_id": a_id, "b_id": b_id}


@pytest.mark.parametrize(("method", "path", "body"), ALL_ROUTES)
@pytest.mark.parametrize("token", [None, "navi_not-a-real-token", "Basic abc"])
def test_missing_or_bad_token_is_401(server: Server, method: str, path: str, body: object,
                                     token: str | None) -> None:
    headers = {}
    if token == "Basic abc":
        headers["Authorization"] = token
    elif token:
        headers["Authorization"] = f"Bearer {token}"
    with server.client() as client:
        resp = client.request(method, path.format(s=S), headers=headers,
                              **({"json": body} if isinstance(body, dict) else {}))
    _assert_error(resp, 401, "unauthorized")
    assert resp.headers.get("www-authenticate") == "Bearer"


@pytest.mark.parametrize(("method", "path", "body"), USER_ROUTES)
def test_auditor_cannot_use_session_routes(server: Server, tenants: dict[str, str], method: str,
                                           path: str, body: object) -> None:
    with server.client(tenants["a_auditor"]) as client:
        _assert_error(_send(client, method, path.format(s=S), body), 403, "forbidden")


@pytest.mark.parametrize(("method", "path", "body"), AUDIT_ROUTES + ADMIN_ROUTES)
def test_user_cannot_read_audit_or_administer(server: Server, tenants: dict[str, str],
                                               method: str, path: str, body: object) -> None:
    with server.client(tenants["a_user"]) as client:
        _assert_error(_send(client, method, path, body), 403, "forbidden")


@pytest.mark.parametrize(("method", "path", "body"), ADMIN_ROUTES[1:2] + AUDIT_ROUTES[:2])
def test_auditor_cannot_administer_but_reads_audit(server: Server, tenants: dict[str, str],
                                                    method: str, path: str, body: object) -> None:
    with server.client(tenants["a_auditor"]) as client:
        resp = _send(client, method, path, body)
    if path.startswith("/v1/audit"):
        assert resp.status_code == 200, resp.text
    else:
        _assert_error(resp, 403, "forbidden")


@pytest.mark.parametrize(("method", "path", "body"),
                         [r for r in USER_ROUTES if "{s}" in r[1]])
def test_other_tenants_session_is_404(server: Server, tenants: dict[str, str], method: str,
                                      path: str, body: object) -> None:
    with server.client(tenants["b_user"]) as owner:
        session = owner.post("/v1/sessions", json={}).json()["id"]
        put = owner.put(f"/v1/sessions/{session}/files/a.txt", content=b"secret")
        assert put.status_code == 201
    with server.client(tenants["a_user"]) as attacker:
        _assert_error(_send(attacker, method, path.format(s=session), body), 404, "not_found")
    with server.client(tenants["b_user"]) as owner:  # and nothing changed for the owner
        assert owner.get(f"/v1/sessions/{session}/files/a.txt").content == b"secret"


def test_sessions_listing_is_tenant_scoped(server: Server, tenants: dict[str, str]) -> None:
    with server.client(tenants["b_user"]) as b:
        mine = b.post("/v1/sessions", json={}).json()["id"]
    with server.client(tenants["a_user"]) as a:
        listed = a.get("/v1/sessions")
        assert listed.status_code == 200 and isinstance(listed.json(), list)
        assert mine not in {s["id"] for s in listed.json()}


def test_token_for_unknown_tenant_is_404(server: Server) -> None:
    with server.client(server.admin_token) as admin:
        resp = admin.post("/v1/tenants/t_ffffffffffffffff/tokens", json={"role": "user"})
    _assert_error(resp, 404, "not_found")


def test_duplicate_tenant_is_409(server: Server) -> None:
    with server.client(server.admin_token) as admin:
        assert admin.post("/v1/tenants", json={"name": "dup-name"}).status_code == 201
        _assert_error(admin.post("/v1/tenants", json={"name": "DUP-name"}), 409, "conflict")


def test_healthz_needs_no_token(server: Server) -> None:
    with server.client() as client:
        assert client.get("/v1/healthz").json()["status"] == "ok"
