"""Tenants, their tokens, the loaded policy.

`admin` (the operator) creates tenants and manages every tenant's tokens; `tenant_admin`
manages its own tenant's tokens only (another tenant answers 404, creating a tenant 403).
Each change is decided (role, then the policy's `roles.<role>.manage`), recorded in the
audit (``Executor.record_action``, fail closed) and only then applied.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response, status

from runtime.api.deps import Admin, TenantManager, actor, check_manages, get_services
from runtime.api.schemas import TenantCreate, TenantOut, TokenCreate, TokenInfo, TokenOut
from runtime.errors import Conflict, Forbidden, NotFound
from runtime.store import TokenRecord
from runtime.store.ids import new_tenant_id, new_token_id
from runtime.store.tokens import check_token_name, now

router = APIRouter(prefix="/v1", tags=["admin"])


@router.post("/tenants", response_model=TenantOut, status_code=status.HTTP_201_CREATED)
async def create_tenant(body: TenantCreate, request: Request, principal: Admin) -> TenantOut:
    services = get_services(request)
    rule = check_manages(services, principal, principal.tenant_id)
    if await services.store.get_tenant_by_name(body.name) is not None:
        raise Conflict(f"a tenant named {body.name!r} already exists")
    tenant_id = new_tenant_id()
    await services.executor.record_action(
        actor(principal, tenant_id), "tenant.create", tenant_id, rule=rule,
        detail=f"name: {body.name}")
    tenant = await services.store.create_tenant(body.name, tenant_id=tenant_id)
    return TenantOut(id=tenant.id, name=tenant.name)


@router.get("/tenants", response_model=list[TenantOut])
async def list_tenants(request: Request, principal: TenantManager) -> list[TenantOut]:
    """Every tenant for the operator; a tenant_admin sees its own."""
    store = get_services(request).store
    if principal.role == "admin":
        tenants = await store.list_tenants()
    else:
        own = await store.get_tenant(principal.tenant_id)
        tenants = [own] if own is not None else []
    return [TenantOut(id=t.id, name=t.name) for t in tenants]


def _info(record: TokenRecord) -> TokenInfo:
    return TokenInfo(id=record.id, tenant=record.tenant_id, role=record.role, name=record.name,
                     created_at=record.created_at, expires_at=record.expires_at,
                     revoked_at=record.revoked_at)


@router.post("/tenants/{tenant_id}/tokens", response_model=TokenOut,
             status_code=status.HTTP_201_CREATED)
async def create_token(tenant_id: str, body: TokenCreate, request: Request,
                       principal: TenantManager) -> TokenOut:
    services = get_services(request)
    store = services.store
    rule = check_manages(services, principal, tenant_id)
    if await store.get_tenant(tenant_id) is None:
        raise NotFound("no such tenant")
    if body.role == "admin":  # the operator's role: only an admin, only in its own tenant
        if principal.role != "admin":
            raise Forbidden("only an admin may mint admin tokens")
        if await store.operator_tenant() not in (None, tenant_id):
            raise Forbidden("role admin exists only in the operator tenant; "
                            "use tenant_admin to manage this tenant")
    check_token_name(body.name)  # refused before anything is recorded
    expires_at = now() + body.expires_in_s if body.expires_in_s is not None else None
    token_id = new_token_id()
    await services.executor.record_action(
        actor(principal, tenant_id), "token.create", token_id, rule=rule,
        detail=f"role: {body.role}")
    plaintext, record = await store.create_token(
        tenant_id, body.role, body.name, expires_at=expires_at, token_id=token_id)
    return TokenOut(id=record.id, token=plaintext, role=record.role, name=record.name,
                    expires_at=record.expires_at, tenant=record.tenant_id)


@router.get("/tenants/{tenant_id}/tokens", response_model=list[TokenInfo])
async def list_tokens(tenant_id: str, request: Request, principal: TenantManager
                      ) -> list[TokenInfo]:
    services = get_services(request)
    check_manages(services, principal, tenant_id)
    if await services.store.get_tenant(tenant_id) is None:
        raise NotFound("no such tenant")
    return [_info(r) for r in await services.store.list_tokens(tenant_id)]


@router.delete("/tenants/{tenant_id}/tokens/{token_id}",
               status_code=status.HTTP_204_NO_CONTENT)
async def revoke_token(tenant_id: str, token_id: str, request: Request,
                       principal: TenantManager) -> Response:
    """Revoke: the token answers 401 from then on. Revoking a revoked token changes nothing."""
    services = get_services(request)
    rule = check_manages(services, principal, tenant_id)
    record = await services.store.get_token(token_id, tenant_id=tenant_id)
    if record is None:
        raise NotFound("no such token")
    if record.role == "admin" and principal.role != "admin":
        raise Forbidden("only an admin may revoke an admin token")
    if record.revoked_at is None:
        await services.executor.record_action(
            actor(principal, tenant_id), "token.revoke", token_id, rule=rule,
            detail=f"role: {record.role}")
        await services.store.revoke_token(token_id, tenant_id=tenant_id)
    services.token_watch.revoked(token_id)  # its open streams end now
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/policies")
async def policies(request: Request, _: Admin) -> dict[str, Any]:
    services = get_services(request)
    return {
        "path": str(services.settings.policy),
        "policy": services.policy.policy.model_dump(mode="json", by_alias=True),
    }
