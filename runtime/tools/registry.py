"""The tool registry: which tools exist, which a caller may see, and how one call runs.

Built-in tools are registered once by the app factory; user tools come from the tenant's
current `UserToolCatalogs` snapshot. What a caller *sees* (`available`, `specs`) is filtered
by the policy engine: a tool is listed when the engine does not deny it for that subject
(a tool's `probe_args` say which argument sets to ask about, e.g. each `code_exec`
language). What a caller *runs* is decided again, per call, with the real arguments: tools
that run code go through the Executor (quota, policy, audit, sandbox); tools that run no
code are decided by the same Executor (`Executor.authorize`: denials and approvals audited)
before `execute`. There is no other path: a context without an Executor runs nothing. The
policy always wins: a denied tool answers `PolicyDenied` (403, with the rule), it is not
hidden as 404.

Callers do not call the registry to run a tool: `runtime.calls.SessionToolCall` does (for
the exec route, the agent, MCP and `navi exec`), with `lookup`, `off_loop` (validation),
`refuse_invalid` and `run`, which answers a typed `ToolOutcome`.

Arguments are validated in a worker thread (`off_loop`): a user tool's schema is
agent-written, and even bounded (`runtime.tools.schema_guard`: at most 1 s per call) its
validation is CPU work a tenant controls, which must not hold the event loop. A tenant has
at most `VALIDATIONS_PER_TENANT` of those threads at a time; its other calls wait in its own
line, so a flood cannot take the shared worker threads every other request needs.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Collection, Iterable
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar

from runtime.errors import InvalidInput, NotFound, SandboxError
from runtime.policy.decision import Action, Decision, Subject
from runtime.tools.base import Tool, ToolContext, ToolOutcome, ToolSpec
from runtime.tools.manuals import ManualLibrary, check_manual_name
from runtime.tools.mcp import McpCatalog
from runtime.tools.user.catalog import UserToolCatalogs
from runtime.tools.user.store import ToolCatalog
from runtime.tools.user.tool import UserTool, user_tool_manual

if TYPE_CHECKING:
    from runtime.executor import Executor

VALIDATIONS_PER_TENANT = 1
T = TypeVar("T")


class PolicyLike(Protocol):
    def decide(self, subject: Subject, action: Any) -> Decision: ...


Approver = Callable[[Subject, Action, Decision], Awaitable[bool]]
"""Resolves a policy `ask` (same signature as the Executor's approver)."""


class ToolRegistry:
    def __init__(
        self,
        tools: Iterable[Tool] = (),
        *,
        policy: PolicyLike | None = None,
        user_tools: UserToolCatalogs | None = None,
        approver: Approver | None = None,
        manuals: ManualLibrary | None = None,
        mcp: McpCatalog | None = None,
    ) -> None:
        self._builtins: dict[str, Tool] = {}
        self.mcp = mcp
        self.policy = policy
        self.user_tools = user_tools
        self.approver = approver
        self.manuals = manuals if manuals is not None else ManualLibrary()
        self._validating: dict[str, asyncio.Semaphore] = {}
        for tool in tools:
            self.register(tool)

    # ---- contents --------------------------------------------------------------------

    def register(self, tool: Tool) -> None:
        if tool.name in self._builtins:
            raise ValueError(f"tool {tool.name!r} registered twice")
        self._builtins[tool.name] = tool

    def builtins(self) -> list[Tool]:
        return list(self._builtins.values())

    def builtin_names(self) -> frozenset[str]:
        return frozenset(self._builtins)

    async def catalog(self, tenant: str) -> ToolCatalog:
        if self.user_tools is None:
            return ToolCatalog()
        return await self.user_tools.get(tenant)

    async def all_tools(self, subject: Subject) -> list[Tool]:
        """Built-ins, the policy's MCP servers' tools and the tenant's enabled user tools,
        before any policy filtering."""
        tools = list(self._builtins.values())
        if self.mcp is not None:
            tools += [t for t in await self.mcp.tools(subject) if t.name not in self._builtins]
        taken = {t.name for t in tools}
        if self.user_tools is not None:
            catalog = await self.user_tools.get(subject.tenant)
            store = self.user_tools.store
            tools += [
                UserTool(loaded, store)
                for loaded in catalog.enabled()
                if loaded.descriptor.name not in taken
            ]
        return tools

    async def lookup(self, name: str, subject: Subject) -> Tool:
        """The tool called `name` for this tenant; `NotFound` if there is none (policy aside)."""
        if not isinstance(name, str) or not name:
            raise InvalidInput("tool name must be a non-empty string")
        tool = self._builtins.get(name)
        if tool is not None:
            return tool
        if self.mcp is not None:
            mcp_tool = await self.mcp.lookup(name, subject)
            if mcp_tool is not None:
                return mcp_tool
        if self.user_tools is not None:
            catalog = await self.user_tools.get(subject.tenant)
            loaded = catalog.tools.get(name)
            if loaded is not None and loaded.enabled:
                return UserTool(loaded, self.user_tools.store)
            if name in catalog.errors:
                raise NotFound(f"user tool {name!r} failed to load: {catalog.errors[name]}")
            if loaded is not None:
                raise NotFound(f"user tool {name!r} is not enabled")
        raise NotFound(f"no tool named {name!r}")

    # ---- what a caller may see ---------------------------------------------------------

    def visible(self, tool: Tool, subject: Subject) -> bool:
        if self.policy is None:
            return True
        for args in tool.probe_args():
            probe = ToolContext(subject=subject)
            decision = self.policy.decide(subject, tool.action(args, probe))
            if decision.verdict != "deny":
                return True
        return False

    async def available(
        self, subject: Subject, *, only: Collection[str] | None = None
    ) -> list[Tool]:
        """Tools this subject may use (policy-filtered), optionally narrowed to `only`."""
        tools = await self.all_tools(subject)
        return [
            t for t in tools if (only is None or t.name in only) and self.visible(t, subject)
        ]

    async def specs(
        self, subject: Subject, *, only: Collection[str] | None = None
    ) -> list[ToolSpec]:
        return [t.spec() for t in await self.available(subject, only=only)]

    async def spec(self, name: str, subject: Subject) -> ToolSpec:
        """One visible tool's spec; a tool the policy hides answers `NotFound` here."""
        tool = await self.lookup(name, subject)
        if not self.visible(tool, subject):
            raise NotFound(f"no tool named {name!r}")
        return tool.spec()

    async def manual(self, name: str, subject: Subject) -> str:
        """The manual of a tool: `manuals/<name>.md`, or for a user tool one made from its
        descriptor. `InvalidInput` on a bad name, `NotFound` when there is none."""
        check_manual_name(name)
        if self.mcp is not None and name not in self._builtins:
            mcp_tool = await self.mcp.lookup(name, subject)
            if mcp_tool is not None:
                return mcp_tool.manual()
        if name in self._builtins or self.user_tools is None:
            return self.manuals.get(name)
        catalog = await self.user_tools.get(subject.tenant)
        loaded = catalog.tools.get(name)
        if loaded is not None:
            return user_tool_manual(loaded)
        if name in catalog.errors:
            raise NotFound(f"user tool {name!r} failed to load: {catalog.errors[name]}")
        return self.manuals.get(name)

    # ---- calling ---------------------------------------------------------------------

    async def off_loop(self, tenant: str, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` in a worker thread, at most `VALIDATIONS_PER_TENANT` at a time for one
        tenant: a call's blocking or CPU-bound preparation (argument validation, time-boxed;
        `SessionToolCall` opens the session's workspace in the same hop)."""
        line = self._validating.setdefault(tenant, asyncio.Semaphore(VALIDATIONS_PER_TENANT))
        async with line:
            return await asyncio.to_thread(fn, *args)

    async def refuse_invalid(self, tool: Tool, args: Any, ctx: ToolContext,
                             error: InvalidInput) -> NoReturn:
        """Raise for arguments `tool.validate` refused (`error`), policy first: see
        `_refuse_if_denied`. For callers that validate off the loop themselves (with
        `off_loop`, in one worker hop with their own blocking work)."""
        try:
            await self._refuse_if_denied(tool, args, ctx)
            raise error
        finally:
            del error, args  # not kept by this frame, which the traceback keeps

    async def run(self, tool: Tool, params: Any, ctx: ToolContext) -> ToolOutcome:
        """Authorise and run a call whose `params` `tool.validate` accepted. A tool that runs
        code is decided by the Executor when it runs (its result carries the run and the
        rule); any other is decided here first and gets a context naming the rule."""
        if tool.runs_in_sandbox:
            result = await tool.execute(params, ctx)
            return ToolOutcome(result=result, execution=result.execution, rule=result.rule)
        decision = await self.authorize(tool, params, ctx)
        result = await tool.execute(params, dataclasses.replace(ctx, rule=decision.rule))
        return ToolOutcome(result=result, execution=result.execution, rule=decision.rule)

    async def _refuse_if_denied(self, tool: Tool, args: Any, ctx: ToolContext) -> None:
        """Arguments that do not validate for a tool the policy denies this subject outright
        (not visible to it): the policy speaks first, so the call answers `PolicyDenied` with
        its rule (audited by the Executor), not an argument error (e.g. `http_request {}`
        under the default policy's `deny: [group:web]`)."""
        if self.policy is None or self.visible(tool, ctx.subject):
            return
        action = tool.action(args if isinstance(args, dict) else {}, ctx)
        if self.policy.decide(ctx.subject, action).verdict == "deny":
            await _executor(ctx).authorize(ctx.subject, action)  # audits, then raises

    async def authorize(self, tool: Tool, params: Any, ctx: ToolContext) -> Decision:
        """Policy check for a tool that runs no code (sandboxed tools: the Executor's job
        too): the Executor decides, audits a denial and resolves an `ask` (with the
        context's approver, else the registry's). There is no second path: without an
        Executor nothing is decided, so nothing runs."""
        args = params.model_dump(mode="json") if hasattr(params, "model_dump") else params
        decision: Decision = await _executor(ctx).authorize(
            ctx.subject, tool.action(args, ctx), approver=ctx.approver or self.approver)
        return decision


def _executor(ctx: ToolContext) -> Executor:
    if ctx.executor is None:
        raise SandboxError("no executor available for this call: every call is decided "
                           "and audited by it")
    return ctx.executor
