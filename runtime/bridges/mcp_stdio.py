"""`navi mcp stdio`: a stdio MCP client (Claude Desktop, an IDE) speaking to Navi's `/mcp`.

Messages are relayed as they are, both ways, between this process's stdin/stdout (MCP's
stdio transport: newline-delimited JSON-RPC) and the server's streamable HTTP endpoint,
with the bearer token on every request; the server decides, audits and runs everything.
Nothing but MCP messages is written to stdout; diagnostics go to stderr.
"""

from __future__ import annotations

import sys

import anyio
from mcp.client.streamable_http import streamable_http_client
from mcp.server.stdio import stdio_server
from mcp.shared._httpx_utils import create_mcp_http_client


def _say(text: str) -> None:
    print(f"navi mcp stdio: {text}", file=sys.stderr, flush=True)


async def relay(url: str, token: str, session: str | None = None) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    if session:
        headers["X-Navi-Session"] = session
    http = create_mcp_http_client(headers=headers)
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
