"""The agent in a session: send a message (the turn runs in the background), read the
conversation, cancel the running turn. What happens is streamed on the session's events."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request, status
from pydantic import Field

from runtime.api.deps import SessionUser, get_services, owned_session, subject_for
from runtime.api.schemas import StrictBody
from runtime.errors import NotFound
from runtime.sessions.message_images import MAX_IMAGES, ImageIn, take_images
from runtime.sessions.titles import title_from_message
from runtime.wire import CancelOut, MessageOut, TurnOut

router = APIRouter(prefix="/v1/sessions", tags=["agent"])

MAX_MESSAGE_CHARS = 64 * 1024


class MessageBody(StrictBody):
    content: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS)
    images: list[ImageIn] | None = Field(
        None, max_length=MAX_IMAGES, description="images for the model: [{path} | {data, mime}]")


@router.post("/{session_id}/messages", response_model=TurnOut,
             status_code=status.HTTP_202_ACCEPTED)
async def post_message(session_id: str, body: MessageBody, request: Request,
                       principal: SessionUser) -> TurnOut:
    """Start a turn; 409 `conflict` while another turn of this session runs. Images (at
    most 4, each at most 5 MiB) go into the model's context for this turn."""
    services = get_services(request)
    record = await owned_session(services, principal, session_id)
    subject = await subject_for(services, principal, record)
    content = body.content.replace("\x00", "")
    images = await take_images(services, record, subject, body.images or [])
    turn_id = await services.agent_loop().start_turn(services, subject, content,
                                                     images=images)
    if record.title is None and (title := title_from_message(content)):
        # an untitled session is named by its first message (not audited: no state of note)
        await services.store.set_session_title(record.tenant_id, record.id, title,
                                               only_if_unset=True)
    return TurnOut(turn_id=turn_id, session=record.id)


@router.get("/{session_id}/messages", response_model=list[MessageOut])
async def list_messages(
    session_id: str, request: Request, principal: SessionUser,
    after: int = Query(0, ge=0, le=2**63 - 1, description="only messages with a larger id"),
    limit: int = Query(1000, ge=1, le=1000),
) -> list[MessageOut]:
    services = get_services(request)
    record = await owned_session(services, principal, session_id)
    rows = await services.agent_loop().history(services, record.id, after=after, limit=limit)
    return list(rows)  # StoredMessage is a MessageOut


@router.get("/{session_id}/turn", response_model=TurnOut)
async def running_turn(session_id: str, request: Request, principal: SessionUser) -> TurnOut:
    """The turn running now (a client that reconnects); 404 when none runs."""
    services = get_services(request)
    record = await owned_session(services, principal, session_id)
    turn_id = services.agent_loop().running(record.id)
    if turn_id is None:
        raise NotFound("no turn is running in this session")
    return TurnOut(turn_id=turn_id, session=record.id)


@router.delete("/{session_id}/turn", response_model=CancelOut)
async def cancel_turn(session_id: str, request: Request, principal: SessionUser) -> CancelOut:
    """Cancel the running turn: its container is killed; 404 when no turn runs."""
    services = get_services(request)
    record = await owned_session(services, principal, session_id)
    turn_id = await services.agent_loop().cancel(record.id, services)
    if turn_id is None:
        raise NotFound("no turn is running in this session")
    return CancelOut(turn_id=turn_id, cancelled=True)
