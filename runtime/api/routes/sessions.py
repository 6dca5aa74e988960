"""Sessions of the caller's tenant: create, list, show, delete (which also ends its sandboxes)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status

from runtime.api.deps import SessionUser, get_services, owned_session, subject_for
from runtime.api.schemas import SessionCreate, SessionOut
from runtime.api.session_ops import open_session
from runtime.store import SessionRecord

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])


def _out(record: SessionRecord) -> SessionOut:
    return SessionOut(id=record.id, profile=record.profile, title=record.title,
                      created_at=record.created_at)


@router.post("", response_model=SessionOut, status_code=status.HTTP_201_CREATED)
async def create_session(
    request: Request, principal: SessionUser, body: SessionCreate | None = None
) -> SessionOut:
    record = await open_session(get_services(request), principal,
                                profile=body.profile if body else None,
                                title=body.title if body else None)
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
