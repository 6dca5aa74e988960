"""Mandatory planning (a policy profile's `planning_mandatory: true`): every turn plans first.

The turn starts in plan mode (only calls that change nothing run) and goes through Navi's
phases, each announced by a `notice {phase}` event:
- `analysis`: the model explores with reads and searches and says what it found;
- `review`: asked to check that analysis as a critical reviewer would (what is missing, what
  could go wrong);
- `plan`: asked for a structured plan (numbered steps) through `exit_plan_mode`, which a person
  approves; the approved steps become the session's todo list;
- `execute`: plan mode is off; each step is marked in the todo list; a step whose tool call
  fails is marked `failed` and a `replan` notice asks the model to revise the remaining steps.
The nudges between phases are stored as the runtime's messages in the conversation (`user`
rows with `meta.navi_phase`), so the context and the history show why the model moved on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runtime.agent.history import MessageStore
from runtime.events import Notice, SessionEvent
from runtime.logging import get_logger
from runtime.policy.decision import Subject
from runtime.policy.plan_mode import PlanModes
from runtime.tools.notes_store import NotesStore

log = get_logger(__name__)

NUDGES = {
    "review": ("[navi] Phase 2 of 3, review: check your analysis as a critical reviewer would. "
               "What is missing or uncertain, what could go wrong, what should be verified? "
               "You may still only read and search."),
    "plan": ("[navi] Phase 3 of 3, plan: write the plan as numbered steps in Markdown and call "
             "exit_plan_mode with it. Nothing changes until the user approves it."),
}
MAX_PLAN_NUDGES = 2


class MandatoryPlanning:
    def __init__(self, *, modes: PlanModes, notes: NotesStore | None, history: MessageStore,
                 subject: Callable[[], Subject], turn_id: str,
                 emit: Callable[[SessionEvent], None]) -> None:
        self.modes = modes
        self.notes = notes
        self.history = history
        self.subject = subject
        self.turn_id = turn_id
        self.emit = emit
        self.phase = "analysis"
        self._plan_nudges = 0

    def _notice(self, phase: str, message: str) -> None:
        self.phase = phase
        self.emit(Notice(turn_id=self.turn_id, phase=phase, message=message))

    async def start(self) -> None:
        subject = self.subject()
        await self.modes.enter(subject.tenant, subject.session)
        self._notice("analysis", "Planning first (this profile requires it): phase 1 of 3, "
                     "analysis, with reads and searches only.")

    async def after_answer(self) -> bool:
        """The model answered without a tool call: True when the turn goes on (next phase)."""
        subject = self.subject()
        if not await self.modes.active(subject.tenant, subject.session):
            return False
        if self.phase == "analysis":
            self._notice("review", "Phase 2 of 3: review of the analysis.")
        elif self.phase in ("review", "plan") and self._plan_nudges < MAX_PLAN_NUDGES:
            self._plan_nudges += 1
            self._notice("plan", "Phase 3 of 3: a structured plan, for the user's approval.")
        else:
            return False
        await self.history.append(subject.session, self.turn_id, "user", NUDGES[self.phase],
                                  meta={"navi_phase": self.phase})
        return True

    async def after_calls(self, outcomes: list[tuple[str, bool, dict[str, Any]]]) -> None:
        """After a round of calls: an approved plan starts the execution; a failed call
        while executing marks its step and asks for a replan."""
        subject = self.subject()
        for tool, success, _meta in outcomes:
            if tool == "exit_plan_mode" and success and self.phase != "execute":
                self._notice("execute", "Plan approved: carrying it out step by step.")
                continue
            if self.phase == "execute" and not success and tool != "todo":
                step = await self._fail_current_step(subject)
                self._notice("replan", (f"Step {step} failed ({tool}); the plan is revised."
                                        if step else f"A step failed ({tool}); the plan is "
                                        "revised."))
                await self.history.append(subject.session, self.turn_id, "user", (
                    "[navi] That step failed. Revise the remaining steps of your plan in the "
                    "todo list (todo set or update), then go on."), meta={"navi_phase": "replan"})

    async def _fail_current_step(self, subject: Subject) -> int | None:
        if self.notes is None:
            return None
        items = await self.notes.todos(subject.tenant, subject.session)
        for item in items:
            if item.get("status") in ("pending", "in_progress"):
                await self.notes.update_todo(subject.tenant, subject.session, int(item["id"]),
                                             status="failed")
                return int(item["id"])
        return None
