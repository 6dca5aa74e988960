"""What the agent loop needs from the server that runs it: the parts, typed.

The API's `Services` satisfies `AgentDeps`; the agent never imports `runtime.api`. Of the
agent service itself (`runtime.agent.service.AgentService`) a turn needs only its parts
(`AgentParts`): this module imports nothing of the agent's that imports it back.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from runtime.agent.llm.types import LLMBackend
from runtime.agent.models import ModelBlacklist
from runtime.agent.profiles import ProfileSet
from runtime.approvals import ApprovalBroker
from runtime.calls import SessionToolCall
from runtime.config import Settings
from runtime.events import EventHub
from runtime.policy.engine import PolicyEngine
from runtime.store import Store
from runtime.tools import ToolServices


class AgentParts(Protocol):
    """What turns and sub-agents use of the app's agent service."""

    @property
    def settings(self) -> Settings: ...

    @property
    def profiles(self) -> ProfileSet: ...

    @property
    def backend(self) -> LLMBackend: ...

    @property
    def persona(self) -> str | None: ...

    @property
    def blacklist(self) -> ModelBlacklist: ...

    @property
    def closers(self) -> list[Callable[[], Awaitable[None]]]:
        """Run by the service's `close()` before its turns are cancelled (background work
        ends first, while the store is open)."""
        ...


class ToolCallDeps(Protocol):
    """Listing a session's tools, calling them, and its events (the agent, the MCP
    endpoint)."""

    @property
    def tools(self) -> ToolServices: ...

    @property
    def calls(self) -> SessionToolCall: ...

    @property
    def hub(self) -> EventHub: ...


class AgentDeps(ToolCallDeps, Protocol):
    @property
    def store(self) -> Store: ...

    @property
    def approvals(self) -> ApprovalBroker: ...

    @property
    def policy(self) -> PolicyEngine: ...

    @property
    def agent(self) -> AgentParts | None: ...
