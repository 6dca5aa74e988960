"""`/mcp` limits in-process (create_app + FakeBackend over ASGI): the open MCP sessions a
tenant may hold, so one tenant cannot take the server's every slot."""

from __future__ import annotations

from tests.unit.test_api_roles import Api, api  # noqa: F401
from tests.unit.test_token_revoke_streams import MCP_HEADERS


async def test_one_tenant_cannot_take_every_mcp_session(api: Api) -> None:  # noqa: F811
    from runtime.api.mcp import endpoint

    a, b = await api.tenant("alpha"), await api.tenant("beta")
    a_user, b_user = (await api.mint(a, "user"))["token"], (await api.mint(b, "user"))["token"]
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}}
    async with api.client(a_user) as client:
        for _ in range(getattr(endpoint, "MAX_SESSIONS_PER_TENANT", 100)):
            assert (await client.post("/mcp", json=init, headers=MCP_HEADERS)).status_code == 200
        full = await client.post("/mcp", json=init, headers=MCP_HEADERS)
        assert full.status_code == 429 and full.headers["Retry-After"], full.text
        assert full.json()["error"]["code"] == "quota_exceeded"
    async with api.client(b_user) as client:  # another tenant still gets one
        assert (await client.post("/mcp", json=init, headers=MCP_HEADERS)).status_code == 200
