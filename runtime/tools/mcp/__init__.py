"""MCP servers a policy declares (`mcp_servers`), offered as sandboxed tools `SERVER__TOOL`."""

from runtime.tools.mcp.catalog import McpCatalog, ServerState
from runtime.tools.mcp.status import McpStatusTool
from runtime.tools.mcp.tool import McpTool

__all__ = ["McpCatalog", "McpStatusTool", "McpTool", "ServerState"]
