"""`PATCH /v1/sessions/{id}` (rename, switch profile), `GET /v1/sessions/{id}/profiles`, and
the title a session gets from its first message, against a real server (README "The web
client"): bad titles are 422, another tenant's session is 404, changes are audited."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Server, start_server, stop_server
from tests.fakes.ollama import FakeOllama

POLICY = Path(__file__).parent / "policies" / "ask_and_quota.yaml"  # developer, reviewer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory,
           ollama: FakeOllama) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("titles"), policy=POLICY, extra_env={
        "NAVI_OLLAMA_HOST": ollama.url, "NAVI_MODEL": "gemma3:270m",
        "NAVI_OPENAI_BASE_URL": ""})
    yield srv
    stop_server(srv)


def test_first_message_titles_the_session_once(server: Server) -> None:
    _, user = server.tenant_with_user()
    with server.client(user) as client:
        sid = client.post("/v1/sessions", json={}).json()["id"]
        assert client.get(f"/v1/sessions/{sid}").json()["title"] is None
        first = "Plot\tthe  monthly\nrainfall <b>for</b> Lisbon " + "and more words " * 8
        assert client.post(f"/v1/sessions/{sid}/messages",
                           json={"content": first}).status_code == 202
        title = client.get(f"/v1/sessions/{sid}").json()["title"]
        assert title.startswith("Plot the monthly rainfall <b>for</b> Lisbon and")
        assert title.endswith("…") and len(title) <= 60 and title.isprintable()
        _wait_idle(client, sid)
        client.post(f"/v1/sessions/{sid}/messages", json={"content": "second message"})
        assert client.get(f"/v1/sessions/{sid}").json()["title"] == title  # only the first


def test_rename_is_validated_audited_and_tenant_bound(server: Server) -> None:
    tenant, user = server.tenant_with_user()
    _, other = server.tenant_with_user()
    with server.client(user) as client:
        sid = client.post("/v1/sessions", json={}).json()["id"]
        renamed = client.patch(f"/v1/sessions/{sid}", json={"title": "  Rainfall study  "})
        assert renamed.status_code == 200, renamed.text
        assert renamed.json()["title"] == "Rainfall study"
        assert client.get("/v1/sessions").json()[0]["title"] == "Rainfall study"
        for bad in ("", "   ", "two\nlines", "bell\x07", "x" * 201, 5):
            resp = client.patch(f"/v1/sessions/{sid}", json={"title": bad})
            assert resp.status_code == 422, (bad, resp.text)
            assert resp.json()["error"]["code"]
        assert client.patch(f"/v1/sessions/{sid}", json={"owner": "x"}).status_code == 422
        assert client.get(f"/v1/sessions/{sid}").json()["title"] == "Rainfall study"
    with server.client(other) as stranger:
        for resp in (stranger.patch(f"/v1/sessions/{sid}", json={"title": "mine"}),
                     stranger.get(f"/v1/sessions/{sid}/profiles"),
                     stranger.patch(f"/v1/sessions/{sid}", json={"profile": "reviewer"})):
            assert resp.status_code == 404, resp.text
    with server.client(server.token_for(tenant, "auditor")) as auditor:
        records = auditor.get("/v1/audit", params={"session": sid}).json()
    changes = [(r["action"], r["object"]) for r in records if r["kind"] == "action"]
    assert changes == [("session.create", sid), ("session.update", sid)]
    assert "Rainfall" not in str(records)  # the title itself stays out of the audit log


def test_profiles_listed_and_switched(server: Server) -> None:
    tenant, user = server.tenant_with_user()
    with server.client(user) as client:
        # what a new session may take: the tenant's profiles for this role, its default active
        offered = client.get("/v1/profiles").json()
        assert [(p["name"], p["active"]) for p in offered] == [
            ("developer", True), ("reviewer", False)]
        sid = client.post("/v1/sessions", json={}).json()["id"]
        listed = client.get(f"/v1/sessions/{sid}/profiles").json()
        assert [(p["name"], p["active"]) for p in listed] == [
            ("developer", True), ("reviewer", False)]
        switched = client.patch(f"/v1/sessions/{sid}", json={"profile": "reviewer"})
        assert switched.status_code == 200 and switched.json()["profile"] == "reviewer"
        listed = client.get(f"/v1/sessions/{sid}/profiles").json()
        assert [p["name"] for p in listed if p["active"]] == ["reviewer"]
        # the next call runs under it: reviewer may not run code
        ran = client.post(f"/v1/sessions/{sid}/exec",
                          json={"tool": "code_exec", "args": {"language": "python",
                                                              "code": "print(1)"}})
        assert ran.status_code == 403, ran.text
        bad = client.patch(f"/v1/sessions/{sid}", json={"profile": "nonexistent"})
        assert bad.status_code == 400 and "not one this session may use" in bad.text
        assert client.patch(f"/v1/sessions/{sid}", json={"profile": "../x"}).status_code == 422
    with server.client(server.token_for(tenant, "auditor")) as auditor:
        records = auditor.get("/v1/audit", params={"session": sid}).json()
    moves = [r["detail"] for r in records if r["action"] == "session.profile"]
    assert moves == ["developer -> reviewer"]


def _wait_idle(client: httpx.Client, sid: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if client.get(f"/v1/sessions/{sid}/turn").status_code == 404:
            return
        time.sleep(0.1)
    raise AssertionError("the turn did not end")
