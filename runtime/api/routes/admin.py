"""Admin: tenants, their tokens, the loaded policy."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, status

from runtime.api.deps import Admin, get_services
from runtime.api.schemas import TenantCreate, TenantOut, TokenCreate, TokenOut
from runtime.errors import NotFound

router = APIRouter(prefix="/v1", tags=["admin"])


@router.post("/tenants", response_model=TenantOut, status_code=status.HTTP_201_CREATED)
async def create_tenant(body: TenantCreate, request: Request, _: Admin) -> TenantOut:
    tenant = await get_services(request).store.create_tenant(body.name)
    return TenantOut(id=tenant.id, name=tenant.name)


@router.get("/tenants", response_model=list[TenantOut])
async def list_tenants(request: Request, _: Admin) -> list[TenantOut]:
    tenants = await get_services(request).store.list_tenants()
    return [TenantOut(id=t.id, name=t.name) for t in tenants]


@router.post("/tenants/{tenant_id}/tokens", response_model=TokenOut,
             status_code=status.HTTP_201_CREATED)
async def create_token(tenant_id: str, body: TokenCreate, request: Request, _: Admin) -> TokenOut:
    store = get_services(request).store
    if await store.get_tenant(tenant_id) is None:
        raise NotFound("no such tenant")
    plaintext, record = await store.create_token(tenant_id, body.role, label=body.label)
    return TokenOut(token=plaintext, role=record.role, id=record.id, tenant=record.tenant_id)


@router.get("/policies")
async def policies(request: Request, _: Admin) -> dict[str, Any]:
    services = get_services(request)
    return {
        "path": str(services.settings.policy),
        "policy": services.policy.policy.model_dump(mode="json", by_alias=True),
    }
