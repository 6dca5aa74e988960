"""MCP servers a policy declares, end to end: a real `navi serve`, the shipped demo server
(written with the official MCP SDK) in the python image, the fake model calling its tools
through the agent loop. The server runs only inside a sandbox: it sees the session's files,
not the host's network; every call is decided and audited with the server's hash."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime.policy import SERVER_TENANT
from runtime.policy.model import McpServer
from runtime.tools.mcp.protocol import server_hash
from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.test_agent_api import audit_of, new_session, one, send, watch
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Call, Reply

pytestmark = pytest.mark.docker

HERE = Path(__file__).resolve().parent
POLICY = HERE / "policies" / "mcp_servers.yaml"
DEMO = McpServer(command=["python3", "-I", "/opt/navi/mcp/demo_server.py"], image="python")
PROFILE = """description: mcp test agent
max_iterations: 4
context_window: 8192
tools: [group:exec, group:fs, group:meta, group:mcp]
system_prompt: You are the test agent.
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, ollama: FakeOllama) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("mcp")
    profiles = tmp / "profiles"
    profiles.mkdir()
    (profiles / "developer.yaml").write_text(PROFILE)
    srv = start_server(tmp, policy=POLICY, extra_env={
        "NAVI_OLLAMA_HOST": ollama.url, "NAVI_PROFILES_DIR": str(profiles),
        "NAVI_MODEL": "gemma3:270m", "NAVI_OPENAI_BASE_URL": "", "NAVI_EMBEDDED_MODEL": "off"})
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def account(server: Server) -> tuple[str, str, str]:
    tenant, user = server.tenant_with_user()
    return tenant, user, server.token_for(tenant, "auditor")


def tools_of(server: Server, token: str, session: str) -> dict[str, Any]:
    with server.client(token) as client:
        resp = client.get("/v1/tools", params={"session": session})
    assert resp.status_code == 200, resp.text
    return {t["name"]: t for t in resp.json()}


def test_the_demo_server_s_tools_are_listed_with_their_schemas(
        server: Server, account: tuple[str, str, str]) -> None:
    _, user, auditor = account
    session = new_session(server, user)
    tools = tools_of(server, user, session)
    assert {"demo__add", "demo__count_words", "demo__reach"} <= set(tools)
    assert "demo__countdown" not in tools  # the profile denies it
    add = tools["demo__add"]
    assert add["group"] == "group:mcp" and set(add["parameters"]["required"]) == {"a", "b"}
    # the listing itself ran in a sandbox, decided and audited (tool `demo__`), as the
    # server (shared by every tenant), not as this tenant: the operator sees it
    assert not [r for r in audit_of(server, auditor, session) if r["tool"] == "demo__"]
    listings = server_listings(server)
    assert [r["kind"] for r in listings] == ["intent", "outcome"], listings
    assert listings[0]["tool_hash"] == server_hash(DEMO)
    assert listings[0]["rule"] == "mcp_servers.demo" and listings[0]["session"] == "none"
    again = new_session(server, user)  # kept: a second listing runs nothing
    assert set(tools_of(server, user, again)) == set(tools)
    assert server_listings(server) == listings


def server_listings(server: Server) -> list[dict[str, Any]]:
    with server.client(server.admin_token) as admin:
        resp = admin.get("/v1/audit", params={"tenant": SERVER_TENANT, "tool": "demo__"})
    assert resp.status_code == 200, resp.text
    return list(resp.json())


def test_the_agent_calls_an_mcp_tool_in_a_sandbox_and_it_is_audited(
        server: Server, account: tuple[str, str, str], ollama: FakeOllama) -> None:
    _, user, auditor = account
    session = new_session(server, user)
    with server.client(user) as client:
        put = client.put(f"/v1/sessions/{session}/files/notes.txt", content=b"one two three\n")
        assert put.status_code in (200, 201), put.text
    ollama.model.add(Reply(calls=[Call("demo__count_words", {"path": "notes.txt"})]),
                     lambda req: Reply(content="MCP said: " + req["messages"][-1]["content"]))
    send(server, user, session, "count the words of notes.txt")
    events = watch(server, user, session)
    result = one(events, "tool_result")
    assert result["tool"] == "demo__count_words" and result["success"] is True, result
    assert "3 words in notes.txt" in result["output"]
    assert events[-1]["type"] == "stream_end" and "3 words" in events[-1]["content"]
    records = [r for r in audit_of(server, auditor, session) if r["exec_id"] == result["exec_id"]]
    assert [r["kind"] for r in records] == ["intent", "outcome"]
    intent = records[0]
    assert intent["tool"] == "demo__count_words" and intent["tool_hash"] == server_hash(DEMO)
    assert intent["image"].startswith("navi/python")
    assert intent["rule"] == "profiles.developer.allow[group:mcp]"


def test_an_mcp_server_has_no_network_and_denials_name_the_rule(
        server: Server, account: tuple[str, str, str]) -> None:
    _, user, _ = account
    session = new_session(server, user)
    port = int(server.url.rsplit(":", 1)[1])
    with server.client(user) as client:
        # the supervisor listens on the host's loopback; the server's sandbox cannot reach it
        reach = client.post(f"/v1/sessions/{session}/exec", json={
            "tool": "demo__reach", "args": {"host": "127.0.0.1", "port": port}})
        assert reach.status_code == 200, reach.text
        assert reach.json()["output"].startswith("unreachable"), reach.json()
        denied = client.post(f"/v1/sessions/{session}/exec", json={
            "tool": "demo__countdown", "args": {"n": 1}})
        assert denied.status_code == 403
        assert "profiles.developer.deny[demo__countdown]" in denied.text
        bad = client.post(f"/v1/sessions/{session}/exec", json={
            "tool": "demo__add", "args": {"a": "x"}})
        assert bad.status_code == 400 and "demo__add" in bad.text


def test_mcp_status_reports_ready_and_failed_servers(
        server: Server, account: tuple[str, str, str]) -> None:
    _, user, _ = account
    session = new_session(server, user)
    with server.client(user) as client:
        resp = client.post(f"/v1/sessions/{session}/exec", json={"tool": "mcp_status",
                                                                  "args": {}})
    assert resp.status_code == 200, resp.text
    servers = {s["server"]: s for s in resp.json()["metadata"]["servers"]}
    assert servers["demo"]["state"] == "ready" and "demo__add" in servers["demo"]["tools"]
    assert servers["broken"]["state"] == "failed"
    assert "exited" in servers["broken"]["error"]
