"""`mcp_status`: the MCP servers the policy declares, their state and their tools."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from runtime.errors import NotFound
from runtime.tools.base import BuiltinTool, NoParams, ToolContext, ToolResult

if TYPE_CHECKING:
    from runtime.tools.mcp.catalog import McpCatalog


class McpStatusTool(BuiltinTool[NoParams]):
    name = "mcp_status"
    description = (
        "Show the MCP servers the policy offers: each one's state (ready or failed, with the "
        "error), its tools (named SERVER__TOOL) and tools left out with the reason."
    )
    group = "group:meta"
    Params = NoParams

    def __init__(self, catalog: McpCatalog | None = None) -> None:
        self.catalog = catalog

    async def execute(self, params: NoParams, ctx: ToolContext) -> ToolResult:
        if self.catalog is None:
            raise NotFound("no MCP catalog here")
        report = await self.catalog.status(ctx.subject)
        if not report:
            return ToolResult.ok("No MCP servers are declared by the policy.", servers=[])
        return ToolResult.ok(json.dumps(report, indent=2, ensure_ascii=False), servers=report)
