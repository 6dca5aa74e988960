"""What the agent loop needs from the server that runs it: the parts, typed.

The API's `Services` satisfies this; the agent never imports `runtime.api`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from runtime.approvals import ApprovalBroker
from runtime.calls import SessionToolCall
from runtime.events import EventHub
from runtime.policy.engine import PolicyEngine
from runtime.store import Store
from runtime.tools import ToolServices

if TYPE_CHECKING:
    from runtime.agent.service import AgentService


class AgentDeps(Protocol):
    @property
    def store(self) -> Store: ...

    @property
    def tools(self) -> ToolServices: ...

    @property
    def calls(self) -> SessionToolCall: ...

    @property
    def hub(self) -> EventHub: ...

    @property
    def approvals(self) -> ApprovalBroker: ...

    @property
    def policy(self) -> PolicyEngine: ...

    @property
    def agent(self) -> AgentService | None: ...
