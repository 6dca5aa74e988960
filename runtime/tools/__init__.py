"""Tools: the base and registry, the built-in tools, manuals, and sandboxed user tools.

The app factory calls `build_tools(data_dir, policy=...)` and keeps the `ToolServices`; the
API and the agent loop call `registry.specs(subject)` to list. To run a tool, every caller
(exec route, agent, MCP, `navi exec`) goes through `runtime.calls.SessionToolCall`, which
calls `registry.run` and gets a typed `ToolOutcome`. Nothing an agent writes ever runs in
the supervisor.
"""

from runtime.tools.base import (
    GROUPS,
    BuiltinTool,
    CallOrigin,
    ImageBlock,
    Tool,
    ToolContext,
    ToolOutcome,
    ToolParams,
    ToolResult,
    ToolSpec,
)
from runtime.tools.factory import ToolServices, build_tools
from runtime.tools.manuals import ManualLibrary
from runtime.tools.registry import ToolRegistry

__all__ = [
    "GROUPS",
    "BuiltinTool",
    "CallOrigin",
    "ImageBlock",
    "ManualLibrary",
    "Tool",
    "ToolContext",
    "ToolOutcome",
    "ToolParams",
    "ToolRegistry",
    "ToolResult",
    "ToolServices",
    "ToolSpec",
    "build_tools",
]
