"""`/mcp`: the control API spoken as MCP (streamable HTTP, the official SDK's transport)."""

from runtime.api.mcp.endpoint import McpEndpoint

__all__ = ["McpEndpoint"]
