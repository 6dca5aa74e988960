"""Admin and observability routes: tenants, tokens, the loaded policy, Prometheus metrics."""

from __future__ import annotations

from tests.e2e.conftest import Server


def test_tenant_and_token_lifecycle(server: Server) -> None:
    with server.client(server.admin_token) as admin:
        tenant = admin.post("/v1/tenants", json={"name": "lifecycle"})
        assert tenant.status_code == 201 and set(tenant.json()) == {"id", "name"}
        token = admin.post(f"/v1/tenants/{tenant.json()['id']}/tokens", json={"role": "user"})
        assert token.status_code == 201
        body = token.json()
        assert body["role"] == "user" and body["token"].startswith("navi_")
        assert tenant.json()["id"] in {t["id"] for t in admin.get("/v1/tenants").json()}
    with server.client(body["token"]) as user:
        assert user.get("/v1/sessions").json() == []
    db = (server.data_dir / "navi.sqlite3").read_bytes()
    assert body["token"].encode() not in db  # only its hash is stored


def test_policies_shows_the_loaded_policy(server: Server) -> None:
    with server.client(server.admin_token) as admin:
        body = admin.get("/v1/policies").json()
    assert body["path"].endswith("default.yaml")
    assert "developer" in body["policy"]["profiles"]


def test_metrics_count_executions(server: Server) -> None:
    tenant, user = server.tenant_with_user()
    with server.client(user) as client:
        session = client.post("/v1/sessions", json={}).json()["id"]
        client.post(f"/v1/sessions/{session}/exec", json={"tool": "todo",
                                                         "args": {"action": "list"}})
        secretary = client.post("/v1/sessions", json={"profile": "secretary"}).json()["id"]
        denied = client.post(f"/v1/sessions/{secretary}/exec", json={
            "tool": "code_exec", "args": {"language": "python", "code": "1"}})
        assert denied.status_code == 403  # denials are audited (an append) and counted
    with server.client(server.token_for(tenant, "auditor")) as auditor:
        resp = auditor.get("/v1/metrics")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    assert f'navi_executions_total{{outcome="ok",tenant="{tenant}",tool="todo"}}' in resp.text
    assert ('navi_policy_denials_total{rule="profiles.secretary.deny[group:exec]",'
            f'tenant="{tenant}"') in resp.text
    for name in ("navi_execution_duration_seconds", "navi_active_executions",
                 "navi_policy_denials"):
        assert name in resp.text
    assert "navi_audit_write_seconds" not in resp.text  # server-wide: the operator's only
    with server.client(server.admin_token) as admin:
        everything = admin.get("/v1/metrics").text
    assert "navi_audit_write_seconds_count 0.0" not in everything
    assert f'navi_executions_total{{outcome="ok",tenant="{tenant}",tool="todo"}}' in everything


def test_metrics_show_a_tenant_only_its_own_series(server: Server) -> None:
    a, a_user = server.tenant_with_user()
    b, b_user = server.tenant_with_user()
    for user in (a_user, b_user):
        with server.client(user) as client:
            session = client.post("/v1/sessions", json={}).json()["id"]
            client.post(f"/v1/sessions/{session}/exec", json={"tool": "todo",
                                                             "args": {"action": "list"}})
    for role in ("auditor", "tenant_admin"):
        with server.client(server.token_for(b, role)) as reader:
            text = reader.get("/v1/metrics").text
        samples = [line for line in text.splitlines() if line and not line.startswith("#")]
        assert samples and all(f'tenant="{b}"' in line for line in samples), samples
        assert a not in text
    with server.client(server.admin_token) as admin:
        text = admin.get("/v1/metrics").text
    assert f'tenant="{a}"' in text and f'tenant="{b}"' in text


def test_audit_verify_tells_a_tenant_only_its_own_figures(server: Server) -> None:
    a, a_user = server.tenant_with_user()
    b, b_user = server.tenant_with_user()
    for user, sessions in ((a_user, 6), (b_user, 1)):
        with server.client(user) as client:
            for _ in range(sessions):
                assert client.post("/v1/sessions", json={}).status_code == 201
    with server.client(server.token_for(b, "auditor")) as auditor:
        b_records = len(auditor.get("/v1/audit").json())
        answers = [auditor.get("/v1/audit/verify").json()]
    with server.client(server.token_for(b, "tenant_admin")) as lead:
        answers.append(lead.get("/v1/audit/verify").json())
    b_records += 1  # the tenant_admin token's own token.create
    assert answers[0] == {"ok": True, "records": b_records - 1, "first_bad_seq": None}
    assert answers[1] == {"ok": True, "records": b_records, "first_bad_seq": None}
    with server.client(server.admin_token) as admin:
        everything = admin.get("/v1/audit/verify").json()
        a_records = len(admin.get("/v1/audit", params={"tenant": a}).json())
    assert everything["ok"] is True and everything["records"] >= a_records + b_records
    assert a_records > b_records


def test_without_admin_env_a_token_file_is_made_once(tmp_path) -> None:  # noqa: ANN001
    import os

    from tests.e2e.conftest import start_server, stop_server

    srv = start_server(tmp_path, extra_env={"NAVI_ADMIN_TOKEN": ""})
    try:
        token_file = srv.data_dir / "admin-token"
        token = token_file.read_text().strip()
        assert oct(os.stat(token_file).st_mode & 0o777) == "0o600"
        assert token not in srv.log()  # only its path is logged
        with srv.client(token) as admin:
            assert admin.post("/v1/tenants", json={"name": "via-file"}).status_code == 201
    finally:
        stop_server(srv)
    again = start_server(tmp_path, extra_env={"NAVI_ADMIN_TOKEN": ""})
    try:
        assert token_file.read_text().strip() == token
        with again.client(token) as admin:
            assert admin.get("/v1/tenants").status_code == 200
    finally:
        stop_server(again)


def test_admin_reads_another_tenants_audit_auditor_cannot(server: Server) -> None:
    tenant, user = server.tenant_with_user()
    with server.client(user) as client:
        secretary = client.post("/v1/sessions", json={"profile": "secretary"}).json()["id"]
        client.post(f"/v1/sessions/{secretary}/exec", json={
            "tool": "code_exec", "args": {"language": "python", "code": "1"}})  # denied, audited
    with server.client(server.admin_token) as admin:
        records = admin.get("/v1/audit", params={"tenant": tenant}).json()
    assert [(r["kind"], r["action"]) for r in records] == [
        ("action", "tenant.create"), ("action", "token.create"), ("action", "session.create"),
        ("denied", "exec")]
    assert {r["tenant"] for r in records} == {tenant}
    other, _ = server.tenant_with_user()
    with server.client(server.token_for(other, "auditor")) as auditor:
        resp = auditor.get("/v1/audit", params={"tenant": tenant})
    assert resp.status_code == 403 and resp.json()["error"]["code"] == "forbidden"
