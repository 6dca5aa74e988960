"""No bearer token and no secret value reaches `navi serve`'s log, whatever the format: a real
server with injected faults (tests/fakes/faulty_serve: a sandbox backend that raises, routes
whose services break) answers 500 in every route family, each logged with its traceback, and
the log is grepped for every token and the granted secret's value."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from runtime.config import PROJECT_ROOT
from tests.e2e.conftest import Server, start_server, stop_server
from tests.fakes.faulty_serve import FLAG

SECRET = "wx-" + secrets.token_hex(12)
TOOL_HASH = hashlib.sha256((PROJECT_ROOT / "tools" / "weather_now.py").read_bytes()).hexdigest()
POLICY = f"""
version: 1
images: {{group:user_tools: tools-runner, code_exec: python}}
network: {{egress_allowlist: [localhost]}}
profiles:
  p:
    allow: [group:user_tools, code_exec]
    tools:
      weather_now:
        network: egress
        egress: [localhost]
        secrets: {{WEATHER_API_KEY: weather_key}}
        tool_hash: "{TOOL_HASH}"
tenants:
  "*": {{profiles: [p], default_profile: p}}
"""


@pytest.fixture(params=["console", "json"])
def faulty(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    srv = start_server(tmp_path, policy=policy, launcher="tests.fakes.faulty_serve",
                       extra_env={"NAVI_LOG_FORMAT": request.param,
                                  "NAVI_EMBEDDED_MODEL": "off"})
    yield srv
    stop_server(srv)


def _call(server: Server, token: str, method: str, path: str, **kw: object) -> httpx.Response:
    with server.client(token) as client:  # a fresh connection: a 500 may close the last one
        return client.request(method, path, **kw)  # type: ignore[arg-type]


async def _mcp_call(server: Server, token: str) -> bool:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http, streamable_http_client(f"{server.url}/mcp", http_client=http) as (
            read, write), ClientSession(read, write) as mcp:
        await mcp.initialize()
        try:
            result = await mcp.call_tool("weather_now", {"city": "Oslo"})
        except MCPError as exc:
            # like the REST API's 500: a reference, never the exception's own text
            assert "injected" not in str(exc) and "internal error (reference" in str(exc)
            return True
        return bool(result.is_error)


def test_errors_in_every_route_family_leave_no_token_or_secret_in_the_log(
        faulty: Server) -> None:
    server = faulty
    tenant, manager = server.tenant_with_user(role="tenant_admin")
    user = server.token_for(tenant, "user")
    assert _call(server, manager, "PUT", f"/v1/tenants/{tenant}/secrets/weather_key",
                 json={"value": SECRET}).status_code == 204
    session = _call(server, user, "POST", "/v1/sessions", json={}).json()["id"]
    assert _call(server, user, "PUT", f"/v1/sessions/{session}/files/a.txt",
                 content=b"x").status_code in (200, 201)

    # the backend raises once the call has its secret
    failed = [_call(server, user, "POST", f"/v1/sessions/{session}/exec",
                    json={"tool": "weather_now", "args": {"city": "Oslo"}})]
    assert asyncio.run(_mcp_call(server, user))  # an MCP tool call fails the same way

    (server.data_dir / FLAG).touch()  # now every route breaks inside
    s = f"/v1/sessions/{session}"
    requests: list[tuple[str, str, str, dict[str, object]]] = [
        (user, "POST", "/v1/sessions", {"json": {}}),
        (user, "GET", s, {}),
        (user, "POST", f"{s}/exec",
         {"json": {"tool": "code_exec", "args": {"language": "python", "code": "1"}}}),
        (user, "GET", f"{s}/files", {}),
        (user, "GET", f"{s}/files/a.txt", {}),
        (user, "PUT", f"{s}/files/b.txt", {"content": SECRET.encode()}),
        (user, "GET", "/v1/tools", {}),
        (manager, "GET", "/v1/audit", {}),
        (manager, "GET", "/v1/audit/verify", {}),
        (manager, "POST", f"/v1/tenants/{tenant}/tokens", {"json": {"role": "user"}}),
        (manager, "GET", f"/v1/tenants/{tenant}/tokens", {}),
        (server.admin_token, "GET", "/v1/tenants", {}),
        (user, "GET", "/v1/approvals", {}),
        (manager, "PUT", f"/v1/tenants/{tenant}/secrets/weather_key", {"json": {"value": SECRET}}),
        (manager, "GET", f"/v1/tenants/{tenant}/secrets", {}),
        (user, "POST", f"{s}/messages", {"json": {"content": f"my key is {SECRET}"}}),
        (user, "GET", f"{s}/messages", {}),
        (manager, "GET", "/v1/metrics", {}),
    ]
    for token, method, path, kw in requests:
        failed.append(_call(server, token, method, path, **kw))
    for resp in failed:
        assert resp.status_code == 500, (resp.request.url, resp.text)
        assert resp.json()["error"]["code"] == "internal_error"
    with pytest.raises(httpx.TransportError):  # the stream breaks after its headers
        _call(server, user, "GET", f"{s}/events", params={"after": 0}, timeout=10)
    (server.data_dir / FLAG).unlink()
    stop_server(server)  # every line written

    log = server.log()
    assert log.count("RuntimeError: injected") >= len(failed), server.ending()
    assert "Traceback (most recent call last)" in log
    found = {name for name, value in (("user token", user), ("tenant_admin token", manager),
                                      ("admin token", server.admin_token), ("secret", SECRET))
             for piece in (value, value[3:15], value[-12:])  # a wrapped line shows pieces
             if piece in log}
    assert not found, f"in the log: {sorted(found)}"
