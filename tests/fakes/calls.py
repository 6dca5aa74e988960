"""Run a tool call in a test the one way the runtime does: through `SessionToolCall`.

Tests describe a call with a `ToolContext` (who asks, the Executor, the workspace, a live
output callback, an approver, a timeout); `call` hands exactly those to a real
`SessionToolCall` (lookup, validation off the loop, policy first for refused arguments,
`registry.run`, metrics, events) and returns its typed `ToolResult`. The only stand-in is
where the files are: the context's own workspace (a copy of its directory handle, which the
call closes) instead of the server's `Workspaces` layout.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from runtime.calls import CallRequest, SessionToolCall
from runtime.events import EventHub, SessionEventBus
from runtime.executor import new_exec_id
from runtime.metrics import Metrics
from runtime.sandbox.backend import OutputCallback
from runtime.tools import ToolContext, ToolRegistry, ToolResult
from runtime.workspace import Workspace
from runtime.workspace.tmpdir import Root


class ContextFiles:
    """`SessionFiles` answering with the context's workspace, whatever the session."""

    def __init__(self, ctx: ToolContext) -> None:
        self.ctx = ctx

    def verify(self, tenant_id: str, session_id: str) -> Path | None:
        return self.ctx.workspace_path

    def open(self, tenant_id: str, session_id: str, *, root: Root = "workspace"
             ) -> Workspace | None:
        ws = self.ctx.workspace
        if root == "tmp":  # the context's tmp directory, as the workspace's uid acts
            acting = ws.acting if isinstance(ws, Workspace) else None
            tmp = self.ctx.tmp_path
            return None if tmp is None else Workspace.at(tmp, acting=acting)
        if ws is None:
            return Workspace.at(self.ctx.workspace_path) if self.ctx.workspace_path else None
        return Workspace(os.dup(ws._root_fd), limits=ws.limits, owner=ws.owner,
                         own_disk=ws.own_disk, acting=ws.acting)

    def tmp_path(self, tenant_id: str, session_id: str) -> Path | None:
        return self.ctx.tmp_path


async def call(registry: ToolRegistry, tool: str, args: Any, ctx: ToolContext) -> ToolResult:
    """One call of `tool` with `args` as `ctx.subject`, through `SessionToolCall`."""

    def output_to(bus: SessionEventBus, exec_id: str) -> OutputCallback | None:
        return ctx.on_output

    calls = SessionToolCall(
        registry=registry, executor=ctx.executor,  # type: ignore[arg-type]
        workspaces=ContextFiles(ctx), hub=EventHub(), metrics=Metrics(),
        approver_for=lambda bus: ctx.approver, output_to=output_to)
    request = CallRequest(tool=tool, args=args, timeout_s=ctx.timeout_s,
                          exec_id=ctx.exec_id or new_exec_id())
    return await calls(ctx.subject, request)
