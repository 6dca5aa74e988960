"""Snapshots of a session's files and forks of a session (docs/sessions.md, "Snapshots and forks").

`POST /v1/sessions/{id}/snapshots {name?}` → 201 `{id, name, created_at, bytes}`; `GET` lists
them (oldest first); `POST .../snapshots/{sid}/restore` → 200 (the snapshot; 409
`session_busy` while a call or file operation is in flight); `DELETE .../snapshots/{sid}` →
204; `POST /v1/sessions/{id}/fork {snapshot?}` → 201, the new session. A session or snapshot
of another tenant is a plain 404. The work is `runtime.sessions.snapshots`.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status
from pydantic import Field, field_validator

from runtime.api.deps import SessionUser, get_services, owned_session, subject_for
from runtime.api.schemas import SessionOut, StrictBody
from runtime.policy.decision import Subject
from runtime.sessions.snapshots import SessionSnapshots
from runtime.sessions.titles import checked_title
from runtime.store import SessionRecord
from runtime.wire import SnapshotOut
from runtime.workspace.snapshots import Snapshot

router = APIRouter(prefix="/v1/sessions", tags=["snapshots"])


class SnapshotBody(StrictBody):
    name: str | None = Field(None, description="one printable line, at most 200 characters")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        return None if value is None else checked_title(value)


class ForkBody(StrictBody):
    snapshot: str | None = Field(None, max_length=64,
                                 description="fork from this snapshot (default: the files now)")


def _out(snap: Snapshot) -> SnapshotOut:
    return SnapshotOut(id=snap.id, name=snap.name, created_at=snap.created_at, bytes=snap.bytes)


async def _context(request: Request, principal: SessionUser, session_id: str
                   ) -> tuple[SessionSnapshots, Subject, SessionRecord]:
    """The caller's session (another tenant's: 404), its policy subject, the service."""
    services = get_services(request)
    record = await owned_session(services, principal, session_id)
    return services.snapshots, await subject_for(services, principal, record), record


@router.post("/{session_id}/snapshots", response_model=SnapshotOut,
             status_code=status.HTTP_201_CREATED)
async def create_snapshot(session_id: str, request: Request, principal: SessionUser,
                          body: SnapshotBody | None = None) -> SnapshotOut:
    snaps, subject, _ = await _context(request, principal, session_id)
    return _out(await snaps.create(subject, body.name if body else None))


@router.get("/{session_id}/snapshots", response_model=list[SnapshotOut])
async def list_snapshots(session_id: str, request: Request,
                         principal: SessionUser) -> list[SnapshotOut]:
    snaps, subject, _ = await _context(request, principal, session_id)
    return [_out(s) for s in await snaps.list(subject)]


@router.post("/{session_id}/snapshots/{snapshot_id}/restore", response_model=SnapshotOut)
async def restore_snapshot(session_id: str, snapshot_id: str, request: Request,
                           principal: SessionUser) -> SnapshotOut:
    snaps, subject, _ = await _context(request, principal, session_id)
    return _out(await snaps.restore(subject, snapshot_id))


@router.delete("/{session_id}/snapshots/{snapshot_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_snapshot(session_id: str, snapshot_id: str, request: Request,
                          principal: SessionUser) -> Response:
    snaps, subject, _ = await _context(request, principal, session_id)
    await snaps.delete(subject, snapshot_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{session_id}/fork", response_model=SessionOut,
             status_code=status.HTTP_201_CREATED)
async def fork_session(session_id: str, request: Request, principal: SessionUser,
                       body: ForkBody | None = None) -> SessionOut:
    snaps, subject, record = await _context(request, principal, session_id)
    forked = await snaps.fork(principal, subject, record, body.snapshot if body else None)
    return SessionOut(id=forked.id, profile=forked.profile, title=forked.title,
                      created_at=forked.created_at, node=forked.node,
                      state=await get_services(request).nodes.state_of(forked))
