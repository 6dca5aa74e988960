"""Sessions of the caller's tenant: create, list, show, rename or switch profile, delete (which
also ends its sandboxes), and the profiles a session may switch to."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter, Request, Response, status

from runtime.api.deps import SessionUser, get_services, owned_session, subject_for
from runtime.api.schemas import SessionCreate, SessionOut, SessionUpdate
from runtime.sessions.lifecycle import end_session, open_session
from runtime.sessions.profiles import SessionProfiles
from runtime.store import SessionRecord
from runtime.tools.builtin.profiles import ProfileInfo

if TYPE_CHECKING:
    from runtime.api.services import Services

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])


async def _out(record: SessionRecord, services: Services) -> SessionOut:
    return SessionOut(id=record.id, profile=record.profile, title=record.title,
                      state=await services.nodes.state_of(record),
                      created_at=record.created_at, node=record.node)


@router.post("", response_model=SessionOut, status_code=status.HTTP_201_CREATED)
async def create_session(
    request: Request, principal: SessionUser, body: SessionCreate | None = None
) -> SessionOut:
    services = get_services(request)
    record = await open_session(services, principal,
                                profile=body.profile if body else None,
                                title=body.title if body else None)
    return await _out(record, services)


@router.get("", response_model=list[SessionOut])
async def list_sessions(request: Request, principal: SessionUser) -> list[SessionOut]:
    services = get_services(request)
    return [await _out(r, services)
            for r in await services.store.list_sessions(principal.tenant_id)]


@router.get("/{session_id}", response_model=SessionOut)
async def get_session(session_id: str, request: Request, principal: SessionUser) -> SessionOut:
    services = get_services(request)
    return await _out(await owned_session(services, principal, session_id), services)


def _profiles(services: Services) -> SessionProfiles:
    return SessionProfiles(services.policy, services.store, services.executor, services.hub)


@router.patch("/{session_id}", response_model=SessionOut)
async def update_session(session_id: str, body: SessionUpdate, request: Request,
                         principal: SessionUser) -> SessionOut:
    """Rename (audited `session.update`) and/or switch the profile (`session.profile`, as
    `switch_profile` does: only one of `GET .../profiles`)."""
    services = get_services(request)
    record = await owned_session(services, principal, session_id)
    subject = await subject_for(services, principal, record)
    if body.profile is not None:
        await _profiles(services).switch(subject, body.profile)
    if body.title is not None and body.title != record.title:
        await services.executor.record_action(subject, "session.update", record.id,
                                              rule=f"roles.{principal.role}", detail="title")
        await services.store.set_session_title(principal.tenant_id, record.id, body.title)
    return await _out(await owned_session(services, principal, session_id), services)


@router.get("/{session_id}/profiles", response_model=list[ProfileInfo])
async def session_profiles(session_id: str, request: Request,
                           principal: SessionUser) -> list[ProfileInfo]:
    """The profiles this session may switch to (`active`: the one it runs under)."""
    services = get_services(request)
    record = await owned_session(services, principal, session_id)
    return await _profiles(services).allowed(await subject_for(services, principal, record))


@router.delete("/{session_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_session(session_id: str, request: Request, principal: SessionUser) -> Response:
    services = get_services(request)
    record = await owned_session(services, principal, session_id)
    subject = await subject_for(services, principal, record)
    await services.executor.record_action(subject, "session.delete", record.id,
                                          rule=f"roles.{principal.role}")
    await end_session(services, record)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
