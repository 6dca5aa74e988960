"""Everything one app instance holds, built in its lifespan and closed in reverse order.

No module keeps state at import: the store, audit log, policy engine, sandbox backend,
executor, tool registry, event hub, approvals and metrics all live here, per app.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runtime.api.token_watch import TokenWatch
from runtime.approvals import ApprovalBroker
from runtime.audit.store import AuditLog
from runtime.audit.verifier import ChainVerifier
from runtime.calls import SessionToolCall
from runtime.config import Settings
from runtime.errors import NotFound
from runtime.events import ApprovalRequired, EventHub, SessionEventBus
from runtime.executor import Approver, Executor
from runtime.logging import get_logger
from runtime.metrics import Metrics
from runtime.nodes import Nodes
from runtime.policy.decision import Action, Decision, Subject
from runtime.policy.engine import PolicyEngine
from runtime.policy.plan_mode import PlanModes
from runtime.processes import ProcessService
from runtime.questions import QuestionBroker
from runtime.sandbox.backend import SandboxBackend
from runtime.sessions.snapshots import SessionSnapshots
from runtime.store import Store
from runtime.store.tenants import Tenants
from runtime.tools import ToolServices
from runtime.tools.event_args import event_args
from runtime.workspace import Workspaces
from runtime.workspace.held_reads import HeldReads

if TYPE_CHECKING:
    from runtime.agent.service import AgentService
    from runtime.cluster.plane import ClusterPlane
    from runtime.kernels import KernelService
    from runtime.ports.service import PortsService
    from runtime.sessions.principal import Principal
    from runtime.store.secrets import SecretStore

log = get_logger(__name__)


@dataclass(frozen=True)
class Granted:
    """An approver's answer: truthy when approved; `decided_by` goes to the audit record."""

    approved: bool
    decided_by: str

    def __bool__(self) -> bool:
        return self.approved


@dataclass
class Services:
    settings: Settings
    store: Store
    audit: AuditLog
    policy: PolicyEngine
    backend: SandboxBackend  # this machine's engine (the local node's)
    executor: Executor
    tools: ToolServices
    workspaces: Workspaces  # this machine's session disks (the local node's)
    nodes: Nodes  # where each session lives: `nodes.for_session(record)`
    tenants: Tenants  # tenant id -> name, sandbox uid (cached)
    hub: EventHub = field(default_factory=EventHub)
    approvals: ApprovalBroker = field(default_factory=ApprovalBroker)
    metrics: Metrics = field(default_factory=Metrics)
    background: list[asyncio.Task[Any]] = field(default_factory=list)
    agent: AgentService | None = None  # the agent loop's turns
    secrets: SecretStore | None = None  # tenants' secrets for tools
    cluster: ClusterPlane | None = None  # NAVI_CLUSTER: the execution nodes
    kernels: KernelService | None = None  # sessions' Python kernels (needs Docker)
    questions: QuestionBroker | None = None  # the agent's `ask_user` questions
    plan_modes: PlanModes | None = None  # sessions whose agent plans (plan mode)
    ports: PortsService | None = None  # session ports, their proxy and preview origin
    session_create_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    reads: HeldReads = field(default_factory=HeldReads)  # downloads in flight, cut on delete
    token_watch: TokenWatch = field(init=False)  # streams end when their token is revoked
    verifier: ChainVerifier = field(init=False)  # /v1/audit/verify, on a worker of its own

    def __post_init__(self) -> None:
        self.token_watch = TokenWatch(self.store)
        self.verifier = ChainVerifier(self.settings.data_dir, head=lambda: self.audit.head)

    async def token_ended(self, principal: Principal) -> None:
        """Returns when `principal`'s token is revoked or expires (see `TokenWatch`)."""
        await self.token_watch.ended(principal)

    def agent_loop(self) -> AgentService:
        if self.agent is None:
            raise NotFound("the agent loop does not run on this server")
        return self.agent

    def secret_store(self) -> SecretStore:
        if self.secrets is None:
            raise NotFound("secrets are not kept on this server")
        return self.secrets

    def approver_for(self, bus: SessionEventBus) -> Approver:
        """An approver that asks the session's humans: `approval_required` on the bus, then
        waits for `POST /v1/approvals/{id}` or the broker's timeout (denied)."""

        async def approve(subject: Subject, action: Action, decision: Decision) -> Granted:
            shown = await asyncio.to_thread(event_args, action.args)  # <= 64 KiB in events
            approval = await self.approvals.ask(
                tenant=subject.tenant, session=subject.session, tool=action.tool,
                args=action.args, rule=decision.rule, reason=decision.reason,
                announce=lambda a: bus.publish(ApprovalRequired(
                    approval_id=a.id, session=a.session, tool=a.tool, args=shown, rule=a.rule,
                    reason=a.reason, status=a.status, created_at=a.created_at,
                    expires_at=a.expires_at, decided_by=a.decided_by, tool_hash=a.tool_hash,
                    requested_by=a.requested_by, approvers=list(a.approvers),
                    self_approve=a.self_approve)),
                timeout_s=self.settings.approval_timeout_s, tool_hash=action.tool_hash,
                requested_by=subject.user, approvers=tuple(decision.approvers) or None,
                self_approve=decision.self_approve,
            )
            return Granted(approval.status == "approved",
                           approval.decided_by or f"system:{approval.status}")

        return approve

    @functools.cached_property
    def calls(self) -> SessionToolCall:
        """The one way to run a tool in a session (exec route, agent, MCP)."""
        return SessionToolCall(registry=self.tools.registry, executor=self.executor,
                               workspaces=self.nodes.get, hub=self.hub, metrics=self.metrics,
                               approver_for=self.approver_for)

    @functools.cached_property
    def processes(self) -> ProcessService:
        """Sessions' background processes (routes, tools, the E2B bridge)."""
        return ProcessService(self)

    @functools.cached_property
    def snapshots(self) -> SessionSnapshots:
        """Session snapshots and fork (the routes, and agent turns' checkpoints)."""
        return SessionSnapshots(self)

    async def _close_workspaces(self) -> None:
        await asyncio.to_thread(self.workspaces.close)

    async def kill_running(self, reason: str) -> None:
        with contextlib.suppress(Exception):
            await self.executor.kill_all(reason)

    async def close(self) -> None:
        for task in self.background:
            task.cancel()
        for task in self.background:
            with contextlib.suppress(BaseException):
                await task
        if self.agent is not None:
            with contextlib.suppress(Exception):
                await self.agent.close()
        await self.kill_running("supervisor shutdown")
        with contextlib.suppress(Exception):  # before the engine and the disks go
            await self.processes.close()
        if self.kernels is not None:  # saved to their sessions' disks: a restart finds them
            with contextlib.suppress(Exception):
                await self.kernels.close()
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                await self.cluster.close()
        if self.ports is not None:
            with contextlib.suppress(Exception):
                await self.ports.close()
        self.hub.close()
        self.verifier.close()
        for closer in (self.tools.close, self.backend.close, self._close_workspaces,
                       self.audit.close, self.store.close):
            try:
                await closer()
            except Exception as exc:  # keep closing the rest
                log.warning("close_failed", error=str(exc))
