"""`list_tools` and `tool_manual`: the agent discovers its tools (and broken user tools)."""

from __future__ import annotations

from pydantic import Field

from runtime.tools.base import (
    TOOL_NAME_PATTERN,
    BuiltinTool,
    NoParams,
    ToolContext,
    ToolParams,
    ToolResult,
)
from runtime.tools.registry import ToolRegistry


class ListToolsTool(BuiltinTool[NoParams]):
    name = "list_tools"
    description = (
        "List the tools you may use (name, group, one-line description), and user tools that "
        "failed to load with their error."
    )
    group = "group:meta"
    Params = NoParams

    def __init__(self, registry: ToolRegistry) -> None:
        self.registry = registry

    async def execute(self, params: NoParams, ctx: ToolContext) -> ToolResult:
        registry = self.registry
        tools = await registry.available(ctx.subject)
        catalog = await registry.catalog(ctx.tenant)
        lines = []
        for tool in sorted(tools, key=lambda t: (t.group, t.name)):
            first = tool.description.strip().splitlines()[0] if tool.description else ""
            lines.append(f"- {tool.name} ({tool.group}): {first}")
        broken = dict(sorted(catalog.errors.items()))
        disabled = sorted(n for n, t in catalog.tools.items() if not t.enabled)
        if broken:
            lines.append("")
            lines.append("User tools that failed to load:")
            lines += [f"- {name}: {error}" for name, error in broken.items()]
        if disabled:
            lines.append("")
            lines.append("Disabled user tools: " + ", ".join(disabled))
        listing = [
            {"name": t.name, "group": t.group, "description": t.description} for t in tools
        ]
        return ToolResult.ok(
            "\n".join(lines), tools=listing, errors=broken, disabled=disabled
        )


class ToolManualParams(ToolParams):
    name: str = Field(
        pattern=TOOL_NAME_PATTERN, description="the tool whose manual to read, e.g. code_exec"
    )


class ToolManualTool(BuiltinTool[ToolManualParams]):
    name = "tool_manual"
    description = "Read the manual of a tool: what it does, its parameters, examples, limits."
    group = "group:meta"
    Params = ToolManualParams

    def __init__(self, registry: ToolRegistry) -> None:
        self.registry = registry

    async def execute(self, params: ToolManualParams, ctx: ToolContext) -> ToolResult:
        text = await self.registry.manual(params.name, ctx.subject)
        return ToolResult.ok(text, name=params.name)
