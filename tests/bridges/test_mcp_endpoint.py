"""`/mcp` with the official SDK's own client against a real `navi serve` on loopback: the
same tokens, the one decision path (policy, audit, container), files as resources."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.test_mcp_servers import POLICY, account  # noqa: F401 - `account`: fixture

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("mcp-endpoint"), policy=POLICY,
                       extra_env={"NAVI_EMBEDDED_MODEL": "off"})
    yield srv
    stop_server(srv)


@asynccontextmanager
async def connect(server: Server, token: str, **headers: str) -> AsyncIterator[ClientSession]:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}", **headers})
    async with http, streamable_http_client(f"{server.url}/mcp", http_client=http) as (
            read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def audit(server: Server, auditor: str, **params: str) -> list[dict[str, Any]]:
    with server.client(auditor) as client:
        resp = client.get("/v1/audit", params=params)
    assert resp.status_code == 200, resp.text
    return list(resp.json())


def test_no_token_or_a_bad_one_is_401(server: Server) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    for headers in ({}, {"Authorization": "Bearer navi_nope"}):
        resp = httpx.post(f"{server.url}/mcp", json=body, headers={
            **headers, "Accept": "application/json, text/event-stream"})
        assert resp.status_code == 401, resp.text
        assert resp.json()["error"]["code"] == "unauthorized"


def test_tools_calls_resources_and_the_audit(server: Server,
                                             account: tuple[str, str, str]) -> None:  # noqa: F811
    _, user, auditor = account

    async def scenario() -> dict[str, Any]:
        async with connect(server, user) as mcp:
            info = await mcp.list_tools()
            tools = {t.name: t for t in info.tools}
            progress: list[str] = []

            async def on_progress(step: float, total: float | None, message: str | None) -> None:
                progress.append(message or "")

            ran = await mcp.call_tool("code_exec", {
                "language": "python",
                "code": "open('made.txt', 'w').write('from mcp\\n')\nprint(6 * 7)"},
                progress_callback=on_progress)
            denied = await mcp.call_tool("demo__countdown", {"n": 1})
            bad = await mcp.call_tool("code_exec", {"language": "cobol", "code": "x"})
            files = await mcp.list_resources()
            made = [r for r in files.resources if r.name == "made.txt"]
            read = await mcp.read_resource(made[0].uri) if made else None
            return {"tools": tools, "ran": ran, "denied": denied, "bad": bad, "read": read,
                    "progress": progress}

    out = asyncio.run(scenario())
    code_exec = out["tools"]["code_exec"]
    assert "language" in code_exec.input_schema["properties"]
    assert "demo__add" in out["tools"] and "demo__countdown" not in out["tools"]
    ran: types.CallToolResult = out["ran"]
    assert not ran.is_error and ran.content[0].text == "42\n", ran
    exec_id, session = ran.structured_content["exec_id"], ran.structured_content["session"]
    assert ran.structured_content["exit_code"] == 0
    assert any("42" in p for p in out["progress"]), out["progress"]  # live output as progress
    assert out["denied"].is_error
    assert "profiles.developer.deny[demo__countdown]" in out["denied"].content[0].text
    assert out["bad"].is_error and "language" in out["bad"].content[0].text
    assert out["read"].contents[0].text == "from mcp\n"
    records = audit(server, auditor, session=session)
    mine = [r["kind"] for r in records if r.get("exec_id") == exec_id]
    assert mine == ["intent", "outcome"]
    assert any(r.get("action") == "session.create" for r in records)
    assert any(r.get("rule") == "profiles.developer.deny[demo__countdown]" for r in records)


def test_x_navi_session_names_the_session_and_must_be_the_tenant_s(
        server: Server, account: tuple[str, str, str]) -> None:  # noqa: F811
    _, user, _ = account
    _, stranger = server.tenant_with_user()
    with server.client(user) as client:
        session = client.post("/v1/sessions", json={}).json()["id"]
        client.put(f"/v1/sessions/{session}/files/hello.txt", content=b"hi")

    async def scenario() -> tuple[list[str], types.CallToolResult]:
        async with connect(server, user, **{"X-Navi-Session": session}) as mcp:
            names = [r.name for r in (await mcp.list_resources()).resources]
        async with connect(server, stranger, **{"X-Navi-Session": session}) as mcp:
            other = await mcp.call_tool("code_exec", {"language": "python", "code": "1"})
        return names, other

    names, other = asyncio.run(scenario())
    assert names == ["hello.txt"]
    assert other.is_error and "no such session" in other.content[0].text


def test_navi_mcp_stdio_bridges_a_stdio_client(server: Server,
                                               account: tuple[str, str, str]) -> None:  # noqa: F811
    import os
    import sys

    from mcp.client.stdio import StdioServerParameters, stdio_client

    _, user, _ = account
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "runtime.cli", "mcp", "stdio", "--url", f"{server.url}/mcp"],
        env={**os.environ, "NAVI_TOKEN": user}, cwd=str(Path(__file__).resolve().parents[2]))

    async def scenario() -> tuple[list[str], types.CallToolResult]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as mcp:
            await mcp.initialize()
            names = [t.name for t in (await mcp.list_tools()).tools]
            ran = await mcp.call_tool("code_exec", {"language": "bash", "code": "echo via-stdio"})
            return names, ran

    names, ran = asyncio.run(scenario())
    assert "code_exec" in names
    assert not ran.is_error and ran.content[0].text == "via-stdio\n"


def test_navi_mcp_stdio_refuses_a_bad_token_or_session_at_once(
        server: Server, account: tuple[str, str, str]) -> None:  # noqa: F811
    """Checked through `runtime.client` before relaying: the API's answer on stderr, exit 1,
    nothing on stdout (an MCP client reads only messages there)."""
    import os
    import subprocess
    import sys

    _, user, _ = account
    root = Path(__file__).resolve().parents[2]
    for token, extra, said in (("navi_nope", [], "401 unauthorized"),
                               (user, ["--session", "ses_nosuchsession"], "404 not_found")):
        run = subprocess.run(
            [sys.executable, "-m", "runtime.cli", "mcp", "stdio", "--url", f"{server.url}/mcp",
             *extra], env={**os.environ, "NAVI_TOKEN": token}, cwd=root, input=b"",
            capture_output=True, timeout=60, check=False)
        assert run.returncode == 1 and run.stdout == b"", run.stderr
        assert said in run.stderr.decode(), run.stderr
