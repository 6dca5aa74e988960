"""Sessions of the caller's tenant: create, list, show, delete (which also ends its sandboxes)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request, Response, status

from runtime.api.deps import SessionUser, get_services, owned_session, subject_for
from runtime.api.schemas import SessionCreate, SessionOut
from runtime.errors import Forbidden, InvalidInput, QuotaExceeded
from runtime.store import SessionRecord
from runtime.store.ids import new_session_id

MiB = 1024 * 1024

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])


def _out(record: SessionRecord) -> SessionOut:
    return SessionOut(id=record.id, profile=record.profile, title=record.title,
                      created_at=record.created_at)


@router.post("", response_model=SessionOut, status_code=status.HTTP_201_CREATED)
async def create_session(
    request: Request, principal: SessionUser, body: SessionCreate | None = None
) -> SessionOut:
    services = get_services(request)
    tenant_name = await services.tenant_name(principal.tenant_id)
    policy = services.policy
    profile = (body.profile if body else None) or policy.default_profile(tenant_name) or "developer"
    if profile not in policy.policy.profiles:
        raise InvalidInput(f"unknown profile {profile!r}")
    found = policy.tenant_rule(tenant_name)
    if found is None or profile not in found[1].profiles:
        raise Forbidden(f"profile {profile!r} is not available to this tenant")
    if principal.role not in policy.policy.profiles[profile].roles:
        raise Forbidden(f"role {principal.role!r} may not use profile {profile!r}")
    quotas = policy.quotas(tenant_name)
    uid = await services.sandbox_uid(principal.tenant_id)
    async with services.session_create_lock:  # the count and the disk admission hold
        if len(await services.store.list_sessions(principal.tenant_id)) >= \
                quotas.sessions_per_tenant:
            raise QuotaExceeded(
                f"the tenant has {quotas.sessions_per_tenant} sessions, its quota; "
                "delete one first", retry_after=60, quota="sessions_per_tenant")
        session_id = new_session_id()
        subject = await subject_for(services, principal, None, profile)
        await services.executor.record_action(  # audited before it exists (fail closed)
            subject.model_copy(update={"session": session_id}), "session.create", session_id,
            rule=f"profiles.{profile}.roles", detail=f"profile {profile}")
        record = await services.store.create_session(
            principal.tenant_id, profile, title=body.title if body else None,
            session_id=session_id)
        try:
            await asyncio.to_thread(
                services.workspaces.create, principal.tenant_id, record.id, uid=uid,
                disk_bytes=quotas.session_disk_mb * MiB,
                tenant_disk_bytes=quotas.tenant_disk_mb * MiB)
        except BaseException:
            await services.store.delete_session(principal.tenant_id, record.id)
            await asyncio.to_thread(services.workspaces.remove, principal.tenant_id, record.id)
            raise
    return _out(record)


@router.get("", response_model=list[SessionOut])
async def list_sessions(request: Request, principal: SessionUser) -> list[SessionOut]:
    return [_out(r) for r in await get_services(request).store.list_sessions(principal.tenant_id)]


@router.get("/{session_id}", response_model=SessionOut)
async def get_session(session_id: str, request: Request, principal: SessionUser) -> SessionOut:
    return _out(await owned_session(get_services(request), principal, session_id))


@router.delete("/{session_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_session(session_id: str, request: Request, principal: SessionUser) -> Response:
    services = get_services(request)
    record = await owned_session(services, principal, session_id)
    subject = await subject_for(services, principal, record)
    await services.executor.record_action(subject, "session.delete", record.id,
                                          rule=f"roles.{principal.role}")
    await services.end_session(record)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
