"""`spawn_agent`: hand a sub-task to a bounded sub-agent and get its answer (no code runs
here; the sub-agent's own calls are decided and audited one by one)."""

from __future__ import annotations

from typing import Protocol

from pydantic import Field

from runtime.errors import NotFound
from runtime.policy.decision import Subject
from runtime.tools.base import BuiltinTool, ToolContext, ToolParams, ToolResult


class SubAgentRunner(Protocol):
    async def run(self, parent: Subject, task: str, profile: str | None,
                  parent_turn: str | None, parent_call: str | None) -> tuple[str, str, str]: ...


class BackgroundStarter(Protocol):
    async def start(self, parent: Subject, task: str, profile: str | None,
                    parent_turn: str | None, parent_call: str | None) -> str: ...


class SpawnAgentParams(ToolParams):
    task: str = Field(min_length=1, max_length=8000,
                      description="what the sub-agent should do, with everything it needs")
    profile: str | None = Field(None, max_length=64,
                                description="a profile no wider than yours (default: yours)")
    background: bool = Field(False, description="run it in the background: returns its "
                             "agent_id at once; read it with process_output, wait with "
                             "process_wait, stop with process_stop")


class SpawnAgentTool(BuiltinTool[SpawnAgentParams]):
    name = "spawn_agent"
    description = (
        "Delegate a self-contained sub-task to a sub-agent in this session (same files, at "
        "most your tools, at most 8 steps) and get its final answer. Blocks until it ends, unless "
        "background is true (then it is one of the session's processes, kind agent)."
    )
    group = "group:meta"
    Params = SpawnAgentParams

    def __init__(self, runner: SubAgentRunner | None = None) -> None:
        self.runner = runner

    async def execute(self, params: SpawnAgentParams, ctx: ToolContext) -> ToolResult:
        if self.runner is None:
            raise NotFound("sub-agents are not available here")
        if params.background:
            starter: BackgroundStarter | None = getattr(self.runner, "background", None)
            if starter is None:
                raise NotFound("background sub-agents are not available here")
            agent_id = await starter.start(ctx.subject, params.task, params.profile,
                                           ctx.origin.turn_id, ctx.origin.call_id)
            return ToolResult.ok(f"sub-agent {agent_id} started in the background; follow it "
                                 "with process_output / process_wait, stop it with "
                                 "process_stop", agent_id=agent_id)
        reason, answer, turn_id = await self.runner.run(
            ctx.subject, params.task, params.profile, ctx.origin.turn_id, ctx.origin.call_id)
        meta = {"sub_turn": turn_id, "stop_reason": reason}
        if reason in ("stop", "max_iterations", "too_long"):
            return ToolResult.ok(answer, **meta)
        return ToolResult.fail(f"the sub-agent ended: {reason}", output=answer, **meta)
