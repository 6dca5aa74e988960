"""Plan mode: while an agent plans, only what changes nothing may run.

The agent enters it with `enter_plan_mode` (or a profile's `planning_mandatory` starts every
turn in it) and leaves it only when a person approves its plan (`exit_plan_mode`, through
the approvals API). Meanwhile the policy engine denies, with rule `plan_mode`, every call
that `changes_nothing` does not accept: reads, listings, searches, manuals, the todo list,
memory search, questions to the user and web reads (which the policy must still allow on
their own). The state is per session, in memory: a restart ends the turns that planned.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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


@dataclass
class PlanState:
    active: bool = False
    plan: str | None = None  # the plan last approved


@dataclass
class PlanModes:
    """Which sessions plan now (one per app, shared by the tools and the agent loop)."""

    sessions: dict[str, PlanState] = field(default_factory=dict)

    def active(self, session: str) -> bool:
        state = self.sessions.get(session)
        return state is not None and state.active

    def enter(self, session: str) -> None:
        self.sessions.setdefault(session, PlanState()).active = True

    def approved(self, session: str, plan: str) -> None:
        state = self.sessions.setdefault(session, PlanState())
        state.active = False
        state.plan = plan

    def drop(self, session: str) -> None:
        self.sessions.pop(session, None)
