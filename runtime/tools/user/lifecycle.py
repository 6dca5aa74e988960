"""`write_tool`, `test_tool`, `reload_tools`, `delete_tool`: the agent manages its own tools.

None of these import the tool: `write_tool` parses it (ast only) before storing it;
`test_tool` runs it (an enabled one only) through the Executor in the tools-runner sandbox,
exactly like a real call (the Action names the tool, its group `group:user_tools` and its
content hash, so the policy decides about *that code*; `test_tool` itself is authorised by
the registry first).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from pydantic import Field

from runtime.errors import Forbidden
from runtime.policy.decision import Action
from runtime.tools.base import (
    TOOL_NAME_PATTERN,
    BuiltinTool,
    NoParams,
    P,
    ToolContext,
    ToolParams,
    ToolResult,
    record_change,
)
from runtime.tools.user.catalog import UserToolCatalogs
from runtime.tools.user.descriptor import (
    MAX_TOOL_BYTES,
    ToolLoadError,
    parse_descriptor,
    validate_params,
)
from runtime.tools.user.tool import USER_TOOLS_GROUP, run_user_tool

TEMPLATE_HINT = (
    "A user tool is a Python file with module-level literals name, description, "
    "parameters (a JSON Schema of type object) and `async def execute(params) -> str`."
)

OffLoop = Callable[..., Awaitable[Any]]
"""`ToolRegistry.off_loop`: `(tenant, fn, *args)` run in the tenant's worker-thread line."""


class _OwnTool(BuiltinTool[P]):
    """One of the tools that manage the agent's own tools: `group:meta`, over the tenant's
    catalogs of user tools."""

    group = "group:meta"

    def __init__(self, catalogs: UserToolCatalogs) -> None:
        self.catalogs = catalogs


class WriteToolParams(ToolParams):
    name: str = Field(pattern=TOOL_NAME_PATTERN, description="tool name, e.g. word_count")
    code: str = Field(
        min_length=1, max_length=MAX_TOOL_BYTES,
        description="the whole Python file; its module-level `name` must equal `name`",
    )


class WriteToolTool(_OwnTool[WriteToolParams]):
    name = "write_tool"
    description = (
        "Create or replace one of your own tools. " + TEMPLATE_HINT
        + " The file is checked (syntax, descriptor) but not run; once written, call it "
        "by its name right away."
    )
    Params = WriteToolParams

    def __init__(self, catalogs: UserToolCatalogs,
                 builtin_names: Callable[[], Collection[str]] = frozenset) -> None:
        super().__init__(catalogs)
        self.builtin_names = builtin_names  # the registry's: a user tool may not take one

    async def execute(self, params: WriteToolParams, ctx: ToolContext) -> ToolResult:
        store = self.catalogs.store
        reserved = set(store.reserved) | set(self.builtin_names())
        if params.name in reserved:
            return ToolResult.fail(f"{params.name!r} is the name of a built-in tool")
        try:
            checked = await asyncio.to_thread(parse_descriptor, params.code.encode("utf-8"))
            await record_change(ctx, "tool.write", params.name, tool=params.name,
                                tool_hash=checked.sha256)
            desc = await asyncio.to_thread(store.write, ctx.tenant, params.name, params.code)
        except ToolLoadError as exc:
            return ToolResult.fail(f"tool not written: {exc.message}", name=params.name)
        await self.catalogs.refresh(ctx.tenant, desc.name)  # callable by its name at once
        return ToolResult.ok(
            f"wrote tool {desc.name} ({desc.size} bytes, sha256 {desc.sha256[:16]}…); "
            f"call it as {desc.name} now",
            name=desc.name, sha256=desc.sha256, size=desc.size,
        )


class ToolTestParams(ToolParams):
    name: str = Field(pattern=TOOL_NAME_PATTERN, description="the user tool to run")
    params: dict[str, Any] = Field(
        default_factory=dict, description="arguments, checked against the tool's parameters"
    )


class ToolTestTool(_OwnTool[ToolTestParams]):
    name = "test_tool"
    description = (
        "Run one of your tools once in the sandbox with the given params, as stored now "
        "(before or after reload_tools), and show its result or error."
    )
    Params = ToolTestParams

    def __init__(self, catalogs: UserToolCatalogs, off_loop: OffLoop | None = None) -> None:
        super().__init__(catalogs)
        self.off_loop = off_loop  # the registry's (validation in the tenant's own line)

    async def execute(self, params: ToolTestParams, ctx: ToolContext) -> ToolResult:
        store = self.catalogs.store
        try:
            loaded = await asyncio.to_thread(store.load, ctx.tenant, params.name)
        except ToolLoadError as exc:
            return ToolResult.fail(f"{params.name} does not load: {exc.message}")
        if not loaded.enabled:  # switched off (enabled.json): not run by test_tool either
            raise Forbidden(f"user tool {params.name!r} is disabled; test_tool runs only "
                            "enabled tools")
        # agent-written schema: time-boxed, and off the event loop (in the tenant's line)
        if self.off_loop is not None:
            args = await self.off_loop(ctx.tenant, validate_params, loaded.descriptor,
                                       params.params)
        else:
            args = await asyncio.to_thread(validate_params, loaded.descriptor, params.params)
        action = Action(
            tool=loaded.descriptor.name, args=args, group=USER_TOOLS_GROUP,
            timeout_s=ctx.timeout_s, tool_hash=loaded.descriptor.sha256,
        )
        return await run_user_tool(loaded, store, args, ctx, action)


class ReloadToolsTool(_OwnTool[NoParams]):
    name = "reload_tools"
    description = "Reload your user tools from disk; lists what loaded and what failed."
    Params = NoParams

    async def execute(self, params: NoParams, ctx: ToolContext) -> ToolResult:
        await record_change(ctx, "tool.reload", "*")
        catalog = await self.catalogs.reload(ctx.tenant)
        enabled = sorted(t.descriptor.name for t in catalog.enabled())
        disabled = sorted(n for n, t in catalog.tools.items() if not t.enabled)
        lines = [f"loaded {len(enabled)} user tool(s): {', '.join(enabled) or '-'}"]
        if disabled:
            lines.append(f"disabled: {', '.join(disabled)}")
        for name, error in sorted(catalog.errors.items()):
            lines.append(f"failed: {name}: {error}")
        return ToolResult.ok(
            "\n".join(lines), loaded=enabled, disabled=disabled, errors=dict(catalog.errors),
            hashes={t.descriptor.name: t.descriptor.sha256 for t in catalog.enabled()},
        )


class DeleteToolParams(ToolParams):
    name: str = Field(pattern=TOOL_NAME_PATTERN, description="the user tool to delete")


class DeleteToolTool(_OwnTool[DeleteToolParams]):
    name = "delete_tool"
    description = "Delete one of your own tools (shipped tools cannot be deleted)."
    Params = DeleteToolParams

    async def execute(self, params: DeleteToolParams, ctx: ToolContext) -> ToolResult:
        await record_change(ctx, "tool.delete", params.name, tool=params.name)
        await asyncio.to_thread(self.catalogs.store.delete, ctx.tenant, params.name)
        await self.catalogs.drop(ctx.tenant, params.name)
        return ToolResult.ok(f"deleted tool {params.name}", name=params.name)
