"""What one turn is made with (`TurnSetup`): the server's parts, the session's history and
subject, the profile and its models, the user's message. The turn (`runtime.agent.loop`),
the model's answers (`runtime.agent.answers`) and the step's tool calls
(`runtime.agent.step_calls`) read it; a `switch_profile` changes its profile and models."""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime.agent.deps import AgentDeps
from runtime.agent.history import MessageStore
from runtime.agent.llm import types as llm
from runtime.agent.models import ModelBlacklist
from runtime.agent.profiles import AgentProfile
from runtime.policy.decision import Subject


@dataclass
class TurnSetup:
    services: AgentDeps
    backend: llm.LLMBackend
    history: MessageStore
    profile: AgentProfile
    persona: str | None
    model: str
    subject: Subject
    turn_id: str
    content: str
    parent_call: str | None = None  # a sub-agent's: the spawn_agent call it answers
    models: list[str] = field(default_factory=list)  # the profile's priority list (or none)
    blacklist: ModelBlacklist | None = None  # models that failed lately (server-wide)
    user_images: dict[str, list[llm.ImageInput]] = field(default_factory=dict)
    """The images sent with this turn's message (`user:<row id>` -> images), for every
    model call of the turn."""
