"""What the sessions service needs from the server that runs it: the parts, typed.

The API's `Services` satisfies these; `runtime.sessions` never imports `runtime.api`. The
services that sit above sessions (the agent loop, kernels, processes, ports) appear only as
the one call a session's end makes of them.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from runtime.approvals import ApprovalBroker
    from runtime.events import EventHub
    from runtime.executor import Executor
    from runtime.nodes import Nodes
    from runtime.policy.engine import PolicyEngine
    from runtime.store import Store
    from runtime.store.tenants import Tenants
    from runtime.tools import ToolServices
    from runtime.workspace import Workspaces
    from runtime.workspace.held_reads import HeldReads


class EndsSessions(Protocol):
    """A service holding a session's work (kernels, background processes)."""

    async def end_session(self, session_id: str, /) -> None: ...


class CancelsTurns(Protocol):
    """The agent loop: a session's running turn is cancelled."""

    async def cancel(self, session_id: str, /) -> object: ...


class ReleasesPorts(Protocol):
    """Session ports: a session's preview links, proxy pool and relay sockets go."""

    async def release_session(self, session_id: str, /) -> None: ...


class SubjectDeps(Protocol):
    """Enough to make a policy subject: the tenant's name and uid, the default profile."""

    @property
    def tenants(self) -> Tenants: ...

    @property
    def policy(self) -> PolicyEngine: ...


class OpenDeps(SubjectDeps, Protocol):
    """Opening a session: quotas, the audit record, a node and its disk."""

    @property
    def store(self) -> Store: ...

    @property
    def nodes(self) -> Nodes: ...

    @property
    def executor(self) -> Executor: ...

    @property
    def session_create_lock(self) -> asyncio.Lock: ...


class SessionDeps(OpenDeps, Protocol):
    """Opening and ending sessions, and their snapshots."""

    @property
    def approvals(self) -> ApprovalBroker: ...

    @property
    def agent(self) -> CancelsTurns | None: ...

    @property
    def kernels(self) -> EndsSessions | None: ...

    @property
    def processes(self) -> EndsSessions: ...

    @property
    def ports(self) -> ReleasesPorts | None: ...

    @property
    def tools(self) -> ToolServices: ...

    @property
    def reads(self) -> HeldReads: ...

    @property
    def hub(self) -> EventHub: ...

    @property
    def workspaces(self) -> Workspaces: ...
