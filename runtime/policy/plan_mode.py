"""Plan mode: while an agent plans, only what changes nothing may run.

The agent enters it with `enter_plan_mode` (or a profile's `planning_mandatory` starts every
turn in it) and leaves it only when a person approves its plan (`exit_plan_mode`, through
the approvals API). Meanwhile the policy engine denies, with rule `plan_mode`, every call
that `changes_nothing` does not accept: reads, listings, searches, manuals, the todo list,
memory search, questions to the user and web reads (which the policy must still allow on
their own). The state is per session and kept in a `PlanStore` (the agent's notes file), so
a restart ends the turns that planned but leaves their sessions in plan mode; without a
store (`navi exec`) it is in memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from runtime.policy.decision import Action

RULE = "plan_mode"

READ_ONLY_TOOLS = frozenset({
    "read_document", "image_view", "list_tools", "tool_manual", "list_profiles",
    "mcp_status", "reflect", "ask_user", "enter_plan_mode", "exit_plan_mode", "todo",
    "grep", "glob", "tree", "notebook_read", "web_search", "web_view", "browser",
    "process_list", "process_output", "process_wait",
})
"""Tools that change nothing whatever their arguments (`todo` is the plan itself)."""

READ_ACTIONS = {
    "filesystem": frozenset({"read", "list"}),
    "memory": frozenset({"search"}),
    "scratchpad": frozenset({"read", "list"}),
}
"""Tools with an `action` argument that change nothing for these actions only."""

READ_METHODS = frozenset({"GET", "HEAD"})


def changes_nothing(action: Action) -> bool:
    """Whether this call may run in plan mode."""
    if action.tool in READ_ONLY_TOOLS:
        return True
    reads = READ_ACTIONS.get(action.tool)
    if reads is not None:
        return action.args.get("action") in reads
    if action.tool == "http_request":
        return str(action.args.get("method") or "GET").upper() in READ_METHODS
    return False


class PlanStore(Protocol):
    """Where plan-mode state lives (`runtime.tools.notes_store.NotesStore`)."""

    async def plan_state(self, tenant_id: str, session: str) -> tuple[bool, str | None]: ...

    async def set_plan_state(self, tenant_id: str, session: str, active: bool,
                             plan: str | None) -> None: ...


@dataclass
class PlanState:
    active: bool = False
    plan: str | None = None  # the plan last approved


@dataclass
class PlanModes:
    """Which sessions plan now (one per app, shared by the tools and the agent loop)."""

    store: PlanStore | None = None
    sessions: dict[tuple[str, str], PlanState] = field(default_factory=dict)
    """Without a store: the state in memory."""

    async def state(self, tenant: str, session: str) -> PlanState:
        if self.store is not None:
            return PlanState(*await self.store.plan_state(tenant, session))
        return self.sessions.get((tenant, session)) or PlanState()

    async def _set(self, tenant: str, session: str, state: PlanState) -> None:
        if self.store is not None:
            await self.store.set_plan_state(tenant, session, state.active, state.plan)
        else:
            self.sessions[(tenant, session)] = state

    async def active(self, tenant: str, session: str) -> bool:
        return (await self.state(tenant, session)).active

    async def enter(self, tenant: str, session: str) -> None:
        state = await self.state(tenant, session)
        await self._set(tenant, session, PlanState(True, state.plan))

    async def approved(self, tenant: str, session: str, plan: str) -> None:
        await self._set(tenant, session, PlanState(False, plan))
