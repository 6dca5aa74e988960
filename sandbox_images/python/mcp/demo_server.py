"""demo: a small MCP server written with the official SDK, shipped in the python image.

A policy declares it to make its tools `demo__<tool>` (see policies/lab.yaml):

    mcp_servers:
      demo: {command: [python3, -I, /opt/navi/mcp/demo_server.py], image: python}

It runs like any Navi execution: one hardened container per call, the session's files as
its working directory, no network unless the policy names hosts for it.
"""

import os
import socket
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("demo")


@server.tool()
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


@server.tool()
def count_words(path: str) -> str:
    """Count the words of a text file of the session's workspace (a relative path)."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    return f"{len(text.split())} words in {path}"


@server.tool()
def workspace_files() -> list[str]:
    """The names in the session's workspace (the server's working directory)."""
    return sorted(os.listdir("."))


@server.tool()
async def countdown(n: int, ctx: Context) -> str:
    """Count down from n (at most 20), reporting progress at every step."""
    n = max(0, min(n, 20))
    for done in range(n + 1):
        await ctx.report_progress(done, n, f"{n - done} left")
    return "lift-off"


@server.tool()
def reach(host: str, port: int = 443) -> str:
    """Try to open a TCP connection to host:port (shows what the sandbox's network allows)."""
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError as exc:
        return f"unreachable: {exc}"
    return "reachable"


if __name__ == "__main__":
    server.run("stdio")
