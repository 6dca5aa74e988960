"""What the process service needs from the server that runs it: the parts, typed.

The API's `Services` satisfies this; `runtime.processes` never imports `runtime.api`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from runtime.audit.store import AuditLog
    from runtime.config import Settings
    from runtime.events import EventHub
    from runtime.executor import Executor
    from runtime.nodes import Nodes
    from runtime.policy.engine import PolicyEngine
    from runtime.store import Store


@dataclass(frozen=True)
class TokenRef:
    """The token that started a process: its work ends when the token does."""

    token_id: str
    tenant_id: str
    expires_at: float | None = None
    role: str = "user"


class TokenEnds(Protocol):
    async def ended(self, principal: Any) -> None:
        """Returns when the token (``token_id``, ``expires_at``) is revoked or expires."""
        ...


class ProcessDeps(Protocol):
    @property
    def settings(self) -> Settings: ...

    @property
    def store(self) -> Store: ...

    @property
    def audit(self) -> AuditLog: ...

    @property
    def executor(self) -> Executor: ...

    @property
    def policy(self) -> PolicyEngine: ...

    @property
    def nodes(self) -> Nodes: ...

    @property
    def hub(self) -> EventHub: ...

    @property
    def token_watch(self) -> TokenEnds: ...
