"""Pending `ask` decisions of the caller's tenant, and answering them."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from runtime.api.deps import SessionUser, get_services
from runtime.api.schemas import ApprovalDecisionBody

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
    approval = services.approvals.decide(
        principal.tenant_id, approval_id, body.decision, by=principal.token_id
    )
    services.hub.bus(approval.session).publish(
        "approval_decided", approval_id=approval.id, status=approval.status,
        decided_by=approval.decided_by,
    )
    return approval.public()
