"""`navi mcp stdio`: a stdio MCP client (Claude Desktop, an IDE) speaking to Navi's `/mcp`.

Messages are relayed as they are, both ways, between this process's stdin/stdout (MCP's
stdio transport: newline-delimited JSON-RPC) and the server's streamable HTTP endpoint,
with the bearer token on every request; the server decides, audits and runs everything.
Nothing but MCP messages is written to stdout; diagnostics go to stderr.

Before relaying, `runtime.client` checks the token (and the session, when one is named)
against the control API beside `/mcp`, so a refused token or an unknown session ends the
bridge at once with the API's answer on stderr (exit status 1) instead of surfacing as a
failed `initialize` in the MCP client. The relay itself needs the MCP SDK's own HTTP client
(its streamable HTTP transport takes nothing else), given the client's headers.
"""

from __future__ import annotations

import sys

import anyio
import httpx
from mcp.client.streamable_http import streamable_http_client
from mcp.server.stdio import stdio_server
from mcp.shared._httpx_utils import create_mcp_http_client
from navi_client.config import headers as client_headers

from runtime.client import AsyncNaviClient, NaviClientError


def _say(text: str) -> None:
    print(f"navi mcp stdio: {text}", file=sys.stderr, flush=True)


class BridgeRefused(Exception):
    """The server refused the token or the session before any MCP message was relayed."""


async def check(url: str, token: str, session: str | None) -> None:
    """The token works (and names the session, when given): else `BridgeRefused`."""
    api = url.rstrip("/").removesuffix("/mcp")
    try:
        async with AsyncNaviClient(api, token, timeout=30.0) as navi:
            if session:
                await navi.get_session(session)
            else:
                await navi.list_tools()
    except NaviClientError as exc:
        raise BridgeRefused(f"{api} refused: {exc}") from None
    except httpx.TransportError as exc:
        raise BridgeRefused(f"cannot reach {api}: {exc}") from None


async def relay(url: str, token: str, session: str | None = None) -> None:
    try:
        await check(url, token, session)
    except BridgeRefused as exc:
        _say(str(exc))
        raise SystemExit(1) from None
    extra = {"X-Navi-Session": session} if session else None
    http = create_mcp_http_client(headers=client_headers(token, extra))
    async with http, streamable_http_client(url, http_client=http) as (remote_in, remote_out), \
            stdio_server() as (local_in, local_out), anyio.create_task_group() as tasks:

        async def upstream() -> None:
            async for message in local_in:
                if isinstance(message, Exception):
                    _say(f"unreadable message from the client: {message}")
                    continue
                await remote_out.send(message)
            tasks.cancel_scope.cancel()  # the client closed stdin: we are done

        async def downstream() -> None:
            async for message in remote_in:
                if isinstance(message, Exception):
                    _say(f"from {url}: {message}")
                    continue
                await local_out.send(message)
            tasks.cancel_scope.cancel()

        tasks.start_soon(upstream)
        tasks.start_soon(downstream)
