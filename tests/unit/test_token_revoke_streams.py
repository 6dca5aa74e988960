"""A revoked token's streams end: SSE events, the WebSocket and `/mcp` streams opened
before the revoke stop at once (a reconnect gets 401), in-process over raw ASGI (httpx's
ASGITransport waits for a whole response, a stream has none)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from runtime.events import ProfileChanged
from tests.unit.test_api_roles import Api, api  # noqa: F401

MCP_HEADERS = {"Accept": "application/json, text/event-stream",
               "Content-Type": "application/json"}


class Stream:
    """One ASGI request held open: what the app sent, and a way to hang up."""

    def __init__(self, app: Any, scope: dict[str, Any], first: list[dict[str, Any]]) -> None:
        self.sent: list[dict[str, Any]] = []
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        for message in first:
            self.inbox.put_nowait(message)
        self.task = asyncio.ensure_future(app(scope, self.inbox.get, self._send))

    async def _send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def text(self) -> str:
        return b"".join(m.get("body", b"") for m in self.sent
                        if m["type"] == "http.response.body").decode() + "".join(
            m.get("text") or "" for m in self.sent if m["type"] == "websocket.send")

    async def ended(self, within: float = 5.0) -> bool:
        try:
            await asyncio.wait_for(asyncio.shield(self.task), within)
        except TimeoutError:
            return False
        return True

    async def hang_up(self, kind: str = "http.disconnect") -> None:
        await self.inbox.put({"type": kind})
        try:
            await asyncio.wait_for(self.task, 5)
        except (TimeoutError, Exception):
            self.task.cancel()


def _scope(kind: str, method: str, path: str, headers: dict[str, str]) -> dict[str, Any]:
    return {"type": kind, "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": method, "scheme": "http" if kind == "http" else "ws", "path": path,
            "raw_path": path.encode(), "query_string": b"", "root_path": "",
            "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
            "client": ("127.0.0.1", 1), "server": ("navi.test", 80)}


async def _user(api: Api) -> tuple[str, dict[str, Any], str]:  # noqa: F811
    tenant = await api.tenant("alpha")
    token = await api.mint(tenant, "user")
    async with api.client(token["token"]) as client:
        session = (await client.post("/v1/sessions", json={})).json()["id"]
    return tenant, token, session


async def _revoke(api: Api, tenant: str, token: dict[str, Any]) -> None:  # noqa: F811
    resp = await api.call(api.admin_token, "DELETE", f"/v1/tenants/{tenant}/tokens/{token['id']}")
    assert resp.status_code == 204, resp.text


async def test_sse_and_websocket_streams_end_when_their_token_is_revoked(
        api: Api) -> None:  # noqa: F811
    tenant, token, session = await _user(api)
    auth = {"Authorization": f"Bearer {token['token']}"}
    sse = Stream(api.app, _scope("http", "GET", f"/v1/sessions/{session}/events", auth),
                 [{"type": "http.request", "body": b"", "more_body": False}])
    ws = Stream(api.app, _scope("websocket", "GET", f"/v1/sessions/{session}/ws", auth),
                [{"type": "websocket.connect"}])
    try:
        bus = api.services.hub.bus(session)
        await asyncio.sleep(0.3)
        bus.publish(ProfileChanged(profile="developer", previous="developer"))
        await asyncio.sleep(0.3)
        assert "profile_changed" in sse.text() and "profile_changed" in ws.text()
        assert not await sse.ended(0.2) and not await ws.ended(0.2)

        await _revoke(api, tenant, token)
        assert await sse.ended(), "the SSE stream outlived its token's revoke"
        assert await ws.ended(), "the WebSocket outlived its token's revoke"
        before = sse.text()
        bus.publish(ProfileChanged(profile="after-revoke", previous="developer"))
        await asyncio.sleep(0.2)
        assert "after-revoke" not in sse.text() + ws.text() and sse.text() == before
        closes = [m for m in ws.sent if m["type"] == "websocket.close"]
        assert closes and closes[-1]["code"] == 4401, ws.sent
        again = await api.call(token["token"], "GET", f"/v1/sessions/{session}/events")
        assert again.status_code == 401
    finally:
        await sse.hang_up()
        await ws.hang_up("websocket.disconnect")


async def test_an_mcp_stream_ends_when_its_token_is_revoked(api: Api) -> None:  # noqa: F811
    tenant, token, _ = await _user(api)
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {token['token']}"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}}
    async with api.client(token["token"]) as client:
        resp = await client.post("/mcp", json=init, headers=MCP_HEADERS)
        assert resp.status_code == 200, resp.text
        mcp_session = resp.headers["mcp-session-id"]
        session_headers = {**headers, "mcp-session-id": mcp_session,
                           "mcp-protocol-version": "2025-06-18"}
        resp = await client.post("/mcp", headers=session_headers, json={
            "jsonrpc": "2.0", "method": "notifications/initialized"})
        assert resp.status_code == 202, resp.text
    listen = Stream(api.app, _scope("http", "GET", "/mcp", session_headers),
                    [{"type": "http.request", "body": b"", "more_body": False}])
    try:
        await asyncio.sleep(0.3)
        starts = [m for m in listen.sent if m["type"] == "http.response.start"]
        assert starts and starts[0]["status"] == 200, listen.sent
        assert not await listen.ended(0.2)
        await _revoke(api, tenant, token)
        assert await listen.ended(), "the MCP stream outlived its token's revoke"
        post = Stream(api.app, _scope("http", "POST", "/mcp", session_headers), [
            {"type": "http.request", "more_body": False, "body": json.dumps(
                {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).encode()}])
        assert await post.ended()
        assert [m["status"] for m in post.sent if m["type"] == "http.response.start"] == [401]
    finally:
        await listen.hang_up()


async def test_a_stream_ends_when_its_token_expires_or_is_revoked_elsewhere(
        api: Api) -> None:  # noqa: F811
    tenant = await api.tenant("alpha")
    short = await api.mint(tenant, "user", expires_in_s=2)
    other = await api.mint(tenant, "user")
    async with api.client(other["token"]) as client:
        session = (await client.post("/v1/sessions", json={})).json()["id"]
    api.services.token_watch.recheck_s = 0.2
    streams = [Stream(api.app, _scope("http", "GET", f"/v1/sessions/{session}/events",
                                      {"Authorization": f"Bearer {t['token']}"}),
                      [{"type": "http.request", "body": b"", "more_body": False}])
               for t in (short, other)]
    try:
        await asyncio.sleep(0.5)
        assert not any([await s.ended(0.1) for s in streams])
        # the CLI revokes in the store, not through the API: the next re-check sees it
        await api.services.store.revoke_token(other["id"], tenant_id=tenant)
        assert await streams[1].ended(2.0)
        assert not await streams[0].ended(0.1)
        assert await streams[0].ended(4.0)  # expired
    finally:
        for s in streams:
            await s.hang_up()

