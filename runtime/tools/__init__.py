"""Tools: the base and registry, the built-in tools, manuals, and sandboxed user tools.

The app factory calls `build_tools(data_dir, policy=...)` and keeps the `ToolServices`; the
API and the agent loop call `registry.specs(subject)` to list and `registry.invoke(name,
args, ctx)` to run. Nothing an agent writes ever runs in the supervisor.
"""

from runtime.tools.base import (
    GROUPS,
    BuiltinTool,
    ImageBlock,
    Tool,
    ToolContext,
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
    "ImageBlock",
    "ManualLibrary",
    "Tool",
    "ToolContext",
    "ToolParams",
    "ToolRegistry",
    "ToolResult",
    "ToolServices",
    "ToolSpec",
    "build_tools",
]
