"""The system prompt and Navi's thinking mechanics, as text the model reads.

- planning: the system prompt asks for a short plan before the first action;
- step validation: after each tool result, check it did what was intended; a failed step
  gets an explicit nudge next to its output;
- iteration budget: after each round of tool results the model is told which step this was
  and how many remain (the last one says: answer now);
- goal anchoring: the same note restates the user's request, so a long tool chain does not
  drift from it.
The notes are added to the copy sent to the model, never stored.

The system prompt also says what the model cannot know by itself (`Situation`): the current
date and time, the server's public address (`NAVI_PUBLIC_URL`) and the memory sections
`user_profile` and `project`; it is rebuilt before every model call, so they stay current.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from runtime.agent.caps import clip
from runtime.agent.llm.types import ChatMessage
from runtime.agent.profiles import AgentProfile

GOAL_CHARS = 600
VALIDATION_NOTE = ("[navi] This step did not succeed. Read the error, fix the cause, and do "
                   "not repeat the same call unchanged.")


SECTION_TITLES = {"user_profile": "About the user (memory section user_profile)",
                  "project": "About this project (memory section project)"}


@dataclass
class Situation:
    """What the prompt says about now and here."""

    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    public_url: str | None = None
    sections: dict[str, str] = field(default_factory=dict)

    def text(self) -> str:
        lines = ["Current date and time: " + self.now.strftime("%A, %Y-%m-%d %H:%M %Z").strip()]
        if self.public_url:
            lines.append(f"This Navi server's public address: {self.public_url}")
        parts = ["\n".join(lines)]
        for name, title in SECTION_TITLES.items():
            text = self.sections.get(name, "").strip()
            if text:
                parts.append(f"{title}:\n{text}")
        return "\n\n".join(parts)


def system_prompt(profile: AgentProfile, persona: str | None, tool_names: list[str],
                  situation: Situation | None = None) -> str:
    parts = [persona.strip()] if persona else []
    parts.append(profile.system_prompt.strip())
    mechanics = profile.thinking
    rules: list[str] = []
    if mechanics.planning:
        rules.append("Before your first action, think through a short plan (a few numbered "
                     "steps), then follow it, adjusting it when a result surprises you.")
    if mechanics.step_validation:
        rules.append("After every tool result, check that it did what you intended before "
                     "the next step. Never report a result you have not seen in a tool output.")
    if mechanics.iteration_budget:
        rules.append(f"You have at most {profile.max_iterations} steps (model turns) for one "
                     "request; finish with a final answer before they run out.")
    if rules:
        parts.append("How you work:\n" + "\n".join(f"- {r}" for r in rules))
    if tool_names:
        parts.append("Tools available in this session: " + ", ".join(tool_names) + ".")
    else:
        parts.append("No tools are available in this session; answer directly.")
    if situation is not None:
        parts.append(situation.text())
        if "memory" in tool_names:
            parts.append("When you learn something lasting about the user or this project, "
                         "keep it with memory {action: \"update_section\", section: "
                         "\"user_profile\" or \"project\", text}.")
    return "\n\n".join(parts)


def annotate(messages: list[ChatMessage], profile: AgentProfile, *, iteration: int,
             goal: str, failed_calls: set[str]) -> None:
    """Add this step's notes to the tool results of the current round (in place)."""
    mechanics = profile.thinking
    if mechanics.step_validation:
        for i, m in enumerate(messages):
            if m.role == "tool" and m.tool_call_id in failed_calls:
                messages[i] = m.model_copy(update={"content": m.content + "\n\n"
                                                   + VALIDATION_NOTE})
    if iteration <= 1 or not messages or messages[-1].role not in ("tool", "user"):
        return
    if messages[-1].role == "user" and not messages[-1].images:
        return  # a fresh request, not a round of tool results
    notes: list[str] = []
    if mechanics.iteration_budget:
        left = profile.max_iterations - iteration + 1
        note = f"[navi] Step {iteration} of {profile.max_iterations}; {left} left."
        if left <= 1:
            note += " This is your last step: give your final answer now, without tools."
        notes.append(note)
    if mechanics.goal_anchoring and goal:
        notes.append("[navi] The user's request: " + clip(goal, GOAL_CHARS))
    if notes:
        last = messages[-1]
        messages[-1] = last.model_copy(update={"content": last.content + "\n\n"
                                               + "\n".join(notes)})
