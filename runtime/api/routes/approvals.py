"""Pending `ask` decisions of the caller's tenant, and answering them (roles and self-approval
as the policy says; each answer is audited as `approval.decide` before it takes effect)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from runtime.api.deps import SessionUser, actor, get_services
from runtime.api.schemas import ApprovalDecisionBody
from runtime.events import ApprovalDecided

router = APIRouter(prefix="/v1/approvals", tags=["approvals"])


@router.get("")
async def list_approvals(request: Request, principal: SessionUser) -> list[dict[str, Any]]:
    broker = get_services(request).approvals
    return [a.public() for a in broker.pending(principal.tenant_id)]


@router.post("/{approval_id}")
async def decide(
    approval_id: str, body: ApprovalDecisionBody, request: Request, principal: SessionUser
) -> dict[str, Any]:
    services = get_services(request)
    pending = services.approvals.check_answerer(principal.tenant_id, approval_id,
                                                by=principal.token_id, role=principal.role)
    await services.executor.record_action(  # audited before it takes effect (fail closed)
        actor(principal, principal.tenant_id, session=pending.session), "approval.decide",
        pending.id, rule=pending.rule, tool=pending.tool, tool_hash=pending.tool_hash,
        detail=f"decision: {body.decision}")
    approval = services.approvals.decide(
        principal.tenant_id, approval_id, body.decision, by=principal.token_id,
        role=principal.role)
    services.hub.bus(approval.session).publish(ApprovalDecided(
        approval_id=approval.id, status=approval.status, decided_by=approval.decided_by))
    return approval.public()
