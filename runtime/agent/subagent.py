"""Sub-agents (`spawn_agent`): a task handed to a bounded agent in the same session.

The sub-agent is a turn of its own, run inline by the parent's tool call: it blocks that
call, and cancelling the parent (its turn, the session) cancels it. It works in the same
session and workspace, as the same tenant and token, under a profile no wider than the
parent's (every tool it would be offered, the parent is offered too), for at most
`MAX_ITERATIONS` steps, and at most `limits.processes.max_agent_depth` levels deep (the
policy's). Its calls take the one decision path and are audited with `parent_turn`; its
events stream on the session's bus (its `stream_start` names the parent's call as
`parent_call`, so clients nest them under that tool card). Its conversation is kept in
memory for the call only: the parent's history holds the task and the answer, not the
sub-agent's steps. It has its own todo and scratchpad (its subject's `agent_id`: its turn
id, or a background agent's id), which no other agent's calls see; they go when it ends.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import time
from typing import Any

from runtime.agent.deps import AgentDeps
from runtime.agent.events import TurnEvents
from runtime.agent.history import MessageRole, MessageStore, StoredMessage, new_turn_id
from runtime.agent.loop import Turn
from runtime.agent.models import profile_models
from runtime.agent.profiles import AgentProfile
from runtime.agent.turn_setup import TurnSetup
from runtime.errors import InvalidInput, NotFound
from runtime.events import NESTED_TURN
from runtime.policy.decision import Subject

MAX_ITERATIONS = 8


class EphemeralHistory(MessageStore):
    """A sub-agent's conversation, in memory for the call (the same interface)."""

    def __init__(self) -> None:
        self.rows: builtins.list[StoredMessage] = []

    async def append(self, session_id: str, turn_id: str, role: MessageRole,
                     content: str = "", **fields: Any) -> int:
        row = StoredMessage(id=len(self.rows) + 1, turn_id=turn_id, role=role,
                            content=content, created_at=time.time(),
                            **{k: v for k, v in fields.items() if v is not None})
        self.rows.append(row)
        return row.id

    async def list(self, session_id: str, *, after: int = 0, limit: int = 1000
                   ) -> builtins.list[StoredMessage]:
        return [r for r in self.rows if r.id > after][:limit]

    async def context(self, session_id: str
                      ) -> tuple[StoredMessage | None, builtins.list[StoredMessage]]:
        summaries = [r for r in self.rows if r.role == "summary"]
        summary = summaries[-1] if summaries else None
        covered = int(summary.meta.get("covers_until", 0)) if summary else 0
        return summary, [r for r in self.rows if r.id > covered and r.role != "summary"]


class SubAgents:
    """Bound to the app's services once they exist (`services`)."""

    def __init__(self) -> None:
        self.services: AgentDeps | None = None
        self.background: Any = None  # `runtime.agent.background.BackgroundAgents`, bound

    @staticmethod
    async def _offered(services: AgentDeps, subject: Subject, profile: AgentProfile
                       ) -> set[str]:
        specs = await services.tools.registry.specs(subject)
        return {t.name for t in specs if profile.offers(t.name, t.group)}

    async def run(self, parent: Subject, task: str, profile: str | None,
                  parent_turn: str | None, parent_call: str | None) -> tuple[str, str, str]:
        """(stop reason, answer, the sub-agent's turn id); `InvalidInput` when refused."""
        turn, _history = await self.build(parent, task, profile, parent_turn, parent_call)
        return await run_nested(turn, parent_call)

    async def build(self, parent: Subject, task: str, profile: str | None,
                    parent_turn: str | None, parent_call: str | None,
                    agent_id: str | None = None) -> tuple[Turn, EphemeralHistory]:
        """The sub-agent's turn, checked and ready (its conversation in `history`); its
        notes are keyed by `agent_id` (default: its turn id)."""
        services = self.services
        agent = services.agent if services is not None else None
        if services is None or agent is None:
            raise NotFound("sub-agents are not available here (no agent service)")
        depth = services.policy.session_limits(parent).processes.max_agent_depth
        if parent.agent_depth >= depth:
            raise InvalidInput(f"a sub-agent may not spawn another here: at most {depth} "
                               "levels of sub-agents (limits.processes.max_agent_depth)")
        name = profile or parent.profile
        found = services.policy.tenant_rule(parent.policy_tenant)
        profiles = services.policy.policy.profiles
        if found is None or name not in found[1].profiles or name not in profiles \
                or parent.role not in profiles[name].roles:
            raise InvalidInput(f"profile {name!r} is not one this session may use")
        turn_id = new_turn_id()
        child = parent.model_copy(update={
            "profile": name, "agent_depth": parent.agent_depth + 1,
            "parent_turn": parent_turn or parent.parent_turn, "agent_id": agent_id or turn_id})
        mine = await self._offered(services, parent, agent.profiles.get(parent.profile))
        child_profile = agent.profiles.get(name)
        theirs = await self._offered(services, child, child_profile)
        if not theirs <= mine:
            extra = ", ".join(sorted(theirs - mine))
            raise InvalidInput(f"profile {name!r} is wider than this agent's "
                               f"({parent.profile!r}): it would add {extra}")
        bounded = child_profile.model_copy(update={
            "max_iterations": min(child_profile.max_iterations, MAX_ITERATIONS)})
        history = EphemeralHistory()
        await history.append(parent.session, turn_id, "user", task)
        models = profile_models(bounded.model, bounded.models, agent.settings.model)
        setup = TurnSetup(services=services, backend=agent.backend, history=history,
                          profile=bounded, persona=agent.persona, model=models[0],
                          subject=child, turn_id=turn_id, content=task,
                          parent_call=parent_call, models=models, blacklist=agent.blacklist)
        return Turn(setup, TurnEvents(services.hub.bus(parent.session), turn_id)), history


async def run_nested(turn: Turn, parent_call: str | None) -> tuple[str, str, str]:
    """Run a sub-agent's turn with its events nested under the parent's call."""
    turn_id = turn.s.turn_id
    nested = NESTED_TURN.set((parent_call or "", turn_id))
    try:
        await turn.run()
    finally:
        NESTED_TURN.reset(nested)
        await _drop_notes(turn)
    reason, answer = turn.ended or ("error", "the sub-agent ended without an answer")
    return reason, answer, turn_id


async def _drop_notes(turn: Turn) -> None:
    """The sub-agent's own todo and notes go with it (shielded: also when it is cancelled)."""
    subject, notes = turn.s.subject, getattr(turn.s.services.tools, "notes", None)
    if notes is not None and subject.agent_id is not None:
        with contextlib.suppress(Exception):
            await asyncio.shield(notes.drop_agent(subject.tenant, subject.session,
                                                  subject.agent_id))
