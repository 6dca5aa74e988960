"""What runs in the sandbox for a policy-declared MCP server, and what comes back.

Each request starts the server inside a fresh container and speaks to it through
`navi-mcp-call` (installed in every Navi image; see sandbox_images/_shared/navi-mcp-call):
`list` answers the server's tools, `call TOOL` one `tools/call` with the arguments on stdin.
The relay prints one JSON line; this module builds its argv and reads that line.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from runtime.policy.model import MCP_SEPARATOR, McpServer

RELAY = ["python3", "-I", "/usr/local/bin/navi-mcp-call"]
LIST_SUFFIX = ""  # the action of a listing is on tool `NAME__` (no tool part)
MCP_TOOL_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
MAX_DESCRIPTION = 2000


class RelayError(Exception):
    """The relay's answer was missing, malformed or an error."""


def server_hash(server: McpServer) -> str:
    """SHA-256 of what the server is (image and command): the `tool_hash` of its calls."""
    canonical = json.dumps({"image": server.image, "command": server.command},
                           sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def list_argv(server: McpServer) -> list[str]:
    return [*RELAY, "list", "--", *server.command]


def call_argv(server: McpServer, tool: str) -> list[str]:
    return [*RELAY, "call", tool, "--", *server.command]


def listing_tool(server_name: str) -> str:
    return f"{server_name}{MCP_SEPARATOR}{LIST_SUFFIX}"


def full_name(server_name: str, tool: str) -> str | None:
    """`SERVER__TOOL`, or None when the server's tool name cannot be a Navi tool name."""
    name = f"{server_name}{MCP_SEPARATOR}{tool}"
    if MCP_SEPARATOR in tool or not MCP_TOOL_NAME.match(name) or len(name) > 64:
        return None
    return name


def relay_answer(stdout: bytes) -> dict[str, Any]:
    """The relay's JSON line (the last non-empty stdout line); `RelayError` if unusable."""
    lines = [line for line in stdout.decode("utf-8", errors="replace").splitlines()
             if line.strip()]
    if not lines:
        raise RelayError("the MCP server gave no answer (it exited before it replied)")
    try:
        answer = json.loads(lines[-1])
    except ValueError:
        raise RelayError("the MCP relay's answer is not JSON (output cut off?)") from None
    if not isinstance(answer, dict) or not isinstance(answer.get("ok"), bool):
        raise RelayError("the MCP relay's answer is malformed")
    if not answer["ok"]:
        error = answer.get("error")
        raise RelayError(error if isinstance(error, str) else "the MCP server failed")
    return answer


def result_text(result: Any) -> tuple[bool, str]:
    """(is_error, text) of a `tools/call` result: text content joined; other content named."""
    if not isinstance(result, dict):
        raise RelayError("the MCP server's tools/call result is not an object")
    parts: list[str] = []
    for item in result.get("content") or []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "text" and isinstance(item.get("text"), str):
            parts.append(item["text"])
        elif kind in ("image", "audio"):
            size = len(item.get("data") or "") * 3 // 4
            parts.append(f"[{kind}: {item.get('mimeType', '?')}, about {size} bytes]")
        elif kind == "resource_link":
            parts.append(f"[resource: {item.get('uri', '?')}]")
        elif kind == "resource":
            resource = item.get("resource")
            resource = resource if isinstance(resource, dict) else {}
            text = resource.get("text")
            parts.append(text if isinstance(text, str) else
                         f"[resource: {resource.get('uri', '?')}]")
    if not parts and result.get("structuredContent") is not None:
        parts.append(json.dumps(result["structuredContent"], ensure_ascii=False))
    return bool(result.get("isError")), "\n".join(parts)
