"""A tenant's secrets for tools: set, list (names only), delete; tenant admins and admins.

Values are write-only over the API: no route returns one, no error repeats one, the audit
records the name (`secret.set`, `secret.delete`, before the change: fail closed). A policy
grants a secret to a tool (`profiles.P.tools.T.secrets`); see README, "Secrets for tools".
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status
from pydantic import BaseModel, Field

from runtime.api.deps import TenantManager, actor, check_manages, get_services
from runtime.api.schemas import StrictBody
from runtime.errors import NotFound
from runtime.store.secrets import MAX_SECRET_BYTES, check_secret_name

router = APIRouter(prefix="/v1/tenants", tags=["secrets"])


class SecretBody(StrictBody):
    value: str = Field(min_length=1, max_length=MAX_SECRET_BYTES,
                       description="the secret (never returned)")


class SecretInfo(BaseModel):
    name: str
    created_at: float
    updated_at: float


async def _tenant(request: Request, principal: TenantManager, tenant_id: str) -> str:
    services = get_services(request)
    rule = check_manages(services, principal, tenant_id)
    if await services.store.get_tenant(tenant_id) is None:
        raise NotFound("no such tenant")
    return rule


@router.put("/{tenant_id}/secrets/{name}", status_code=status.HTTP_204_NO_CONTENT)
async def set_secret(tenant_id: str, name: str, body: SecretBody, request: Request,
                     principal: TenantManager) -> Response:
    rule = await _tenant(request, principal, tenant_id)
    check_secret_name(name)
    services = get_services(request)
    await services.executor.record_action(actor(principal, tenant_id), "secret.set", name,
                                          rule=rule)
    await services.secret_store().set(tenant_id, name, body.value)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/{tenant_id}/secrets", response_model=list[SecretInfo])
async def list_secrets(tenant_id: str, request: Request, principal: TenantManager
                       ) -> list[SecretInfo]:
    await _tenant(request, principal, tenant_id)
    return [SecretInfo(**s) for s in await get_services(request).secret_store().names(tenant_id)]


@router.delete("/{tenant_id}/secrets/{name}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_secret(tenant_id: str, name: str, request: Request,
                        principal: TenantManager) -> Response:
    rule = await _tenant(request, principal, tenant_id)
    check_secret_name(name)
    services = get_services(request)
    if name not in {s["name"] for s in await services.secret_store().names(tenant_id)}:
        raise NotFound(f"no secret named {name!r}")
    await services.executor.record_action(actor(principal, tenant_id), "secret.delete",
                                          name, rule=rule)
    await services.secret_store().delete(tenant_id, name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
