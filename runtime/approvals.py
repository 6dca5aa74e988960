"""Pending human approvals: a policy `ask` pauses the caller until someone decides or time runs out.

The broker is shared by the exec route and the agent loop. A request is visible only to its
tenant; an unanswered request is denied at its deadline (fail closed). Who may answer is the
policy's (``Decision.approvers``: roles of the asking tenant); the token that asked answers
only where the policy says ``self_approve``. A request names the agent-written tool's
content hash when there is one (what would run is exactly that content).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from runtime.errors import Conflict, Forbidden, NotFound

DecisionText = Literal["approve", "deny"]


@dataclass
class Approval:
    id: str
    tenant: str
    session: str
    tool: str
    args: dict[str, Any]
    rule: str
    reason: str
    created_at: float
    expires_at: float
    status: Literal["pending", "approved", "denied", "expired"] = "pending"
    decided_by: str | None = None
    tool_hash: str | None = None
    requested_by: str | None = None  # the token whose call asked
    approvers: tuple[str, ...] = ("user", "tenant_admin", "admin")
    self_approve: bool = True
    _future: asyncio.Future[bool] | None = field(repr=False, default=None)

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id, "session": self.session, "tool": self.tool, "args": self.args,
            "rule": self.rule, "reason": self.reason, "status": self.status,
            "created_at": self.created_at, "expires_at": self.expires_at,
            "decided_by": self.decided_by, "tool_hash": self.tool_hash,
            "requested_by": self.requested_by, "approvers": list(self.approvers),
            "self_approve": self.self_approve,
        }


class ApprovalBroker:
    def __init__(self, timeout_s: float = 300.0, keep_decided: int = 500) -> None:
        self.timeout_s = timeout_s
        self._items: dict[str, Approval] = {}
        self._keep_decided = keep_decided

    async def ask(
        self, *, tenant: str, session: str, tool: str, args: dict[str, Any], rule: str,
        reason: str, announce: Callable[[Approval], object] | None = None,
        timeout_s: float | None = None, tool_hash: str | None = None,
        requested_by: str | None = None, approvers: tuple[str, ...] | None = None,
        self_approve: bool = True,
    ) -> Approval:
        """Register a request, announce it, wait for a decision; returns it decided."""
        now = time.time()
        wait = self.timeout_s if timeout_s is None else timeout_s
        approval = Approval(
            id="ap_" + secrets.token_hex(8), tenant=tenant, session=session, tool=tool,
            args=args, rule=rule, reason=reason, created_at=now, expires_at=now + wait,
            tool_hash=tool_hash, requested_by=requested_by, self_approve=self_approve,
        )
        if approvers is not None:
            approval.approvers = tuple(approvers)
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        approval._future = future
        self._items[approval.id] = approval
        self._trim()
        if announce is not None:
            announce(approval)
        try:
            await asyncio.wait_for(asyncio.shield(future), timeout=wait)
        except TimeoutError:
            approval.status = "expired"
        return approval

    def pending(self, tenant: str) -> list[Approval]:
        return [a for a in self._items.values() if a.tenant == tenant and a.status == "pending"]

    def get(self, tenant: str, approval_id: str) -> Approval:
        approval = self._items.get(approval_id)
        if approval is None or approval.tenant != tenant:
            raise NotFound("no such approval")
        return approval

    def check_answerer(self, tenant: str, approval_id: str, by: str, role: str) -> Approval:
        """The pending request if the token ``by`` (of ``role``) may answer it: ``NotFound``
        (another tenant's, or none), ``Conflict`` (already decided), ``Forbidden`` (a role
        the policy does not name, or the asking token where self-approval is off)."""
        approval = self.get(tenant, approval_id)
        if approval.status != "pending":
            raise Conflict(f"approval already {approval.status}")
        if role not in approval.approvers:
            raise Forbidden(f"role {role!r} may not answer this approval "
                            f"(approvers: {', '.join(approval.approvers)})")
        if by == approval.requested_by and not approval.self_approve:
            raise Forbidden("the token that asked may not approve its own request here "
                            "(the policy's self_approve is false)")
        return approval

    def decide(self, tenant: str, approval_id: str, decision: DecisionText, by: str,
               role: str) -> Approval:
        """Answer a request (after ``check_answerer``'s checks, made again here)."""
        approval = self.check_answerer(tenant, approval_id, by, role)
        approval.status = "approved" if decision == "approve" else "denied"
        approval.decided_by = by
        if approval._future is not None and not approval._future.done():
            approval._future.set_result(approval.status == "approved")
        return approval

    def cancel_session(self, session: str) -> None:
        for approval in self._items.values():
            if approval.session == session and approval.status == "pending":
                approval.status = "denied"
                approval.decided_by = "system:session_closed"
                if approval._future is not None and not approval._future.done():
                    approval._future.set_result(False)

    def _trim(self) -> None:
        decided = [a for a in self._items.values() if a.status != "pending"]
        for approval in decided[: max(0, len(decided) - self._keep_decided)]:
            self._items.pop(approval.id, None)
