"""`reflect`: the model reviews the turn so far (one bounded extra model call, no tools; the
call itself lives in `runtime.agent.reflect`, the tool layer only reaches it)."""

from __future__ import annotations

from typing import Protocol

from runtime.errors import NotFound
from runtime.policy.decision import Subject
from runtime.tools.base import BuiltinTool, NoParams, ToolContext, ToolResult


class Reviewer(Protocol):
    async def review(self, subject: Subject, turn_id: str | None) -> str: ...


class ReflectTool(BuiltinTool[NoParams]):
    name = "reflect"
    description = (
        "Step back: have the model review this turn so far (what is done, what went wrong, "
        "what to do next) and get the review. Takes no arguments."
    )
    group = "group:meta"
    Params = NoParams

    def __init__(self, reviewer: Reviewer | None = None) -> None:
        self.reviewer = reviewer

    async def execute(self, params: NoParams, ctx: ToolContext) -> ToolResult:
        if self.reviewer is None:
            raise NotFound("reflect is not available here")
        review = await self.reviewer.review(ctx.subject, ctx.origin.turn_id)
        if not review:
            return ToolResult.fail("the model gave no review")
        return ToolResult.ok(review, turn=ctx.origin.turn_id)
