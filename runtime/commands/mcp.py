"""`navi mcp stdio`: bridge a stdio MCP client to a Navi server's `/mcp` endpoint."""

from __future__ import annotations

import os
from typing import Annotated

import anyio
import typer

app = typer.Typer(help="MCP: use Navi from MCP clients (Claude Desktop, IDEs, agents).",
                  no_args_is_help=True)


@app.command("stdio")
def stdio(
    url: Annotated[str, typer.Option(help="The server's MCP endpoint, e.g. "
                                          "http://127.0.0.1:8000/mcp")] = "",
    token: Annotated[str, typer.Option(
        help="A user token (default: $NAVI_TOKEN; prefer the variable: argv is visible to "
             "other local users)")] = "",
    session: Annotated[str, typer.Option(help="Work in this existing session "
                                              "(default: a new one per connection)")] = "",
) -> None:
    """Relay MCP between this process's stdin/stdout and URL, with TOKEN on every request."""
    from runtime.bridges.mcp_stdio import relay

    url = url or os.environ.get("NAVI_URL", "").rstrip("/") + "/mcp"
    token = token or os.environ.get("NAVI_TOKEN", "")
    if not url.startswith(("http://", "https://")):
        raise typer.BadParameter("give --url (or NAVI_URL): the server's /mcp endpoint")
    if not token:
        raise typer.BadParameter("give --token (or NAVI_TOKEN)")
    anyio.run(relay, url, token, session or None)
