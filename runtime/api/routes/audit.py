"""Reading the audit log (auditor/tenant_admin/admin, scoped to the caller's tenant; the
operator admin may name another with `?tenant=`) and verifying it (the whole chain, on the
verifier's own worker; a tenant is told only its own figures, the operator the log's)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Query, Request

from runtime.api.deps import AuditReader, get_services
from runtime.api.schemas import VerifyOut
from runtime.errors import Forbidden, InvalidInput, NotFound

router = APIRouter(prefix="/v1/audit", tags=["audit"])


def _since(value: str | None) -> dict[str, Any]:
    """`since` is a record seq (exclusive) or an ISO-8601 time (inclusive)."""
    if value is None or value == "":
        return {}
    if value.isascii() and value.isdigit():
        if len(value) > 18:  # beyond any seq (SQLite integers are 64-bit)
            raise InvalidInput("since: seq out of range")
        return {"since_seq": int(value)}
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput("since must be a record seq or an ISO-8601 time") from None
    if parsed.tzinfo is None:
        raise InvalidInput("since needs a time zone (e.g. 2026-01-01T00:00:00Z)")
    return {"since_ts": parsed.astimezone(UTC).isoformat(timespec="microseconds")}


@router.get("")
async def list_audit(
    request: Request, principal: AuditReader,
    session: str | None = Query(None, max_length=64),
    tool: str | None = Query(None, max_length=64),
    exec_id: str | None = Query(None, max_length=64),
    action: str | None = Query(None, max_length=64,
                               description="exec, or a state change such as token.create"),
    since: str | None = Query(None, max_length=64),
    limit: int = Query(1000, ge=1, le=10000),
    tenant: str | None = Query(None, max_length=64,
                               description="admin only: another tenant's records"),
) -> list[dict[str, Any]]:
    if tenant is not None and tenant != principal.tenant_id and principal.role != "admin":
        if principal.role == "tenant_admin":  # it manages its own tenant; others are unknown
            raise NotFound("no such tenant")
        raise Forbidden("only an admin may read another tenant's audit")
    records = await get_services(request).audit.records(
        tenant=tenant or principal.tenant_id, session=session, tool=tool, exec_id=exec_id,
        action=action, limit=limit, **_since(since),
    )
    return [r.model_dump(mode="json") for r in records]


@router.get("/verify", response_model=VerifyOut)
async def verify(request: Request, principal: AuditReader) -> VerifyOut:
    """`ok` is the whole chain's (it is one: a break anywhere is a break); `records` and
    `first_bad_seq` are the log's for the operator's admin, else the caller's tenant's own."""
    report = await get_services(request).verifier.report()
    if principal.role == "admin":
        return VerifyOut(**report.public())
    return VerifyOut(**report.for_tenant(principal.tenant_id))
