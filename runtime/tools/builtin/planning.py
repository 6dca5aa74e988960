"""`enter_plan_mode`, `exit_plan_mode`: the agent plans first, and a person approves the plan.

In plan mode only calls that change nothing run (`runtime.policy.plan_mode`; every other call
is denied by the policy engine with rule `plan_mode`, audited like any denial). The plan (in
Markdown) goes to the session's humans through the approvals API (`approval_required`, then
`POST /v1/approvals/{id}`); approved, the agent leaves plan mode (audited `plan.exit`) and
the plan's steps become the todo list (a sub-agent's own); refused or unanswered, it stays in
plan mode (kept in the notes file: a restart does not end it).
Only an agent turn plans: called from `/exec` or MCP these tools answer 400.
"""

from __future__ import annotations

import re

from pydantic import Field

from runtime.audit.records import sha256_hex
from runtime.errors import InvalidInput
from runtime.policy.decision import Action, Decision
from runtime.policy.plan_mode import RULE, PlanModes
from runtime.tools.base import (
    BuiltinTool,
    NoParams,
    ToolContext,
    ToolParams,
    ToolResult,
    record_change,
)
from runtime.tools.notes_store import NotesStore, owner_key

MAX_PLAN_CHARS = 16_000
MAX_STEPS = 50
_STEP = re.compile(r"^\s*(?:\d+[.)]|[-*+])\s+(?:\[[ xX]\]\s+)?(.+?)\s*$")


def plan_steps(plan: str) -> list[str]:
    """The plan's steps: its numbered or bulleted lines, in order (at most `MAX_STEPS`)."""
    steps = [m.group(1)[:500] for line in plan.splitlines() if (m := _STEP.match(line))]
    return steps[:MAX_STEPS]


def _in_turn(ctx: ToolContext, tool: str) -> None:
    if ctx.origin.turn_id is None:
        raise InvalidInput(f"{tool} works only inside an agent turn")


class EnterPlanModeTool(BuiltinTool[NoParams]):
    name = "enter_plan_mode"
    description = (
        "Enter plan mode: from now on only reading, listing, searching and asking run, until "
        "exit_plan_mode with your plan is approved by the user. Use it before larger changes."
    )
    group = "group:meta"
    Params = NoParams

    def __init__(self, modes: PlanModes) -> None:
        self.modes = modes

    async def execute(self, params: NoParams, ctx: ToolContext) -> ToolResult:
        _in_turn(ctx, self.name)
        if await self.modes.active(ctx.tenant, ctx.session):
            return ToolResult.ok("already in plan mode", plan_mode=True)
        await record_change(ctx, "plan.enter", ctx.session)
        await self.modes.enter(ctx.tenant, ctx.session)
        return ToolResult.ok(
            "plan mode on: explore with reads and searches, then call exit_plan_mode with "
            "your plan (numbered steps, Markdown); it runs once the user approves it",
            plan_mode=True)


class ExitPlanModeParams(ToolParams):
    plan: str = Field(min_length=1, max_length=MAX_PLAN_CHARS,
                      description="the plan in Markdown: one numbered step per line")


class ExitPlanModeTool(BuiltinTool[ExitPlanModeParams]):
    name = "exit_plan_mode"
    description = (
        "Show your plan (Markdown, numbered steps) to the user for approval; approved, plan "
        "mode ends, the steps become the todo list and you carry them out."
    )
    group = "group:meta"
    Params = ExitPlanModeParams

    def __init__(self, modes: PlanModes, notes: NotesStore | None = None) -> None:
        self.modes = modes
        self.notes = notes

    async def execute(self, params: ExitPlanModeParams, ctx: ToolContext) -> ToolResult:
        _in_turn(ctx, self.name)
        if not await self.modes.active(ctx.tenant, ctx.session):
            return ToolResult.fail("not in plan mode (call enter_plan_mode first)")
        if ctx.approver is None:
            return ToolResult.fail("nobody can approve a plan here; still in plan mode",
                                   plan_mode=True)
        approved = await ctx.approver(ctx.subject, Action(
            tool=self.name, args={"plan": params.plan}, group=self.group), Decision(
            verdict="ask", rule=RULE, reason="The agent asks you to approve its plan before "
            "it changes anything."))
        if not approved:
            return ToolResult.fail("the plan was not approved (refused or unanswered): still "
                                   "in plan mode; revise it or ask the user what to change",
                                   plan_mode=True)
        steps = plan_steps(params.plan)
        await record_change(ctx, "plan.exit", ctx.session, detail=(
            f"sha256:{sha256_hex(params.plan.encode())} steps:{len(steps)}"))
        await self.modes.approved(ctx.tenant, ctx.session, params.plan)
        if steps and self.notes is not None:
            owner = owner_key(ctx.session, ctx.subject.agent_id)
            await self.notes.set_todos(ctx.tenant, owner, [(step, "pending") for step in steps])
        listed = "\n".join(f"{n}. {s}" for n, s in enumerate(steps, start=1))
        return ToolResult.ok(
            "plan approved: plan mode is off. Work through the steps, marking each in the "
            "todo list (todo update) as you go." + (f"\nSteps:\n{listed}" if listed else ""),
            plan_mode=False, steps=steps)


def plan_tools(modes: PlanModes | None, notes: NotesStore) -> list[BuiltinTool[NoParams]
                                                                | BuiltinTool[ExitPlanModeParams]]:
    """Both tools over one plan state (none given: a state of their own, as in `navi exec`),
    kept in the notes file (a restart does not leave plan mode)."""
    modes = modes if modes is not None else PlanModes()
    if modes.store is None:
        modes.store = notes
    return [EnterPlanModeTool(modes), ExitPlanModeTool(modes, notes)]
