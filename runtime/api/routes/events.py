"""Live session events: SSE with `Last-Event-ID` resume, and the same JSON over WebSocket."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Header, Query, Request, WebSocket, WebSocketDisconnect
from fastapi.sse import EventSourceResponse, ServerSentEvent

from runtime.api.deps import (
    SESSION_ROLES,
    CallerSession,
    SessionUser,
    authenticate,
    bearer_token,
    get_services,
    owned_session,
)
from runtime.api.token_watch import until
from runtime.errors import Forbidden, NaviError
from runtime.events import Event, SessionEventBus

router = APIRouter(prefix="/v1/sessions", tags=["events"])

WS_AUTH_TIMEOUT_S = 10.0


def sse_frame(event: Event) -> ServerSentEvent:
    return ServerSentEvent(raw_data=event.wire, id=str(event.id))


def event_id(text: str | None) -> int | None:
    """An event id from a header or query value; anything but 1-18 ASCII digits is None."""
    text = (text or "").strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else None


def _last_id(header: str | None, query: int | None) -> int | None:
    if query is not None:
        return max(0, query)
    return event_id(header)


@router.get("/{session_id}/events", response_class=EventSourceResponse)
async def session_events(
    session_id: str,
    request: Request,
    session: CallerSession,
    principal: SessionUser,
    last_event_id: str | None = Header(None, alias="Last-Event-ID"),
    after: int | None = Query(None, description="replay events after this id"),
) -> AsyncIterator[ServerSentEvent]:
    services = get_services(request)
    bus = services.hub.bus(session.id)
    # the stream ends when the token is revoked or expires (a reconnect then gets 401)
    async for event in until(bus.subscribe(_last_id(last_event_id, after)),
                             services.token_ended(principal)):
        yield sse_frame(event)


@router.websocket("/{session_id}/ws")
async def session_ws(websocket: WebSocket, session_id: str) -> None:
    """Token in the `Authorization` header, or as the first message `{"token": "..."}`."""
    services = websocket.app.state.services
    await websocket.accept()
    try:
        token = bearer_token(websocket.headers.get("authorization"))
        if token is None:
            first = await asyncio.wait_for(websocket.receive_json(), WS_AUTH_TIMEOUT_S)
            token = first.get("token") if isinstance(first, dict) else None
        principal = await authenticate(services, token if isinstance(token, str) else None)
        if principal.role not in SESSION_ROLES:
            raise Forbidden(f"this needs one of the roles: {', '.join(SESSION_ROLES)}")
        await owned_session(services, principal, session_id)
        last = event_id(websocket.query_params.get("after"))
    except (NaviError, TimeoutError, ValueError, WebSocketDisconnect) as exc:
        code = getattr(exc, "code", "unauthorized")
        message = getattr(exc, "message", "authentication failed")
        with contextlib.suppress(Exception):
            await websocket.send_json({"type": "error", "code": code, "message": message})
            await websocket.close(code={"unauthorized": 4401, "not_found": 4404}.get(code, 4403))
        return
    await websocket.send_json({"type": "ready", "session": session_id})
    reader = asyncio.create_task(_drain(websocket, services, session_id))
    writer = asyncio.create_task(_pump(websocket, services.hub.bus(session_id), last))
    revoked = asyncio.create_task(services.token_ended(principal))
    try:  # whichever ends first (client gone, the bus closed, the token revoked) ends all
        await asyncio.wait({reader, writer, revoked}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (reader, writer, revoked):
            task.cancel()
        await asyncio.gather(reader, writer, revoked, return_exceptions=True)
        with contextlib.suppress(Exception):
            if revoked.done() and not revoked.cancelled() and revoked.exception() is None:
                await websocket.send_json({"type": "error", "code": "unauthorized",
                                           "message": "the token was revoked or expired"})
                await websocket.close(code=4401)
            else:
                await websocket.close()


async def _pump(websocket: WebSocket, bus: SessionEventBus, last: int | None) -> None:
    with contextlib.suppress(WebSocketDisconnect, RuntimeError):
        async for event in bus.subscribe(last):
            await websocket.send_text(event.wire)


async def _drain(websocket: WebSocket, services: Any, session_id: str) -> None:
    """Read client messages so a disconnect is noticed; `{"type": "cancel"}` cancels the
    running agent turn (its container is killed); anything else is ignored."""
    with contextlib.suppress(WebSocketDisconnect, RuntimeError):
        while True:
            text = await websocket.receive_text()
            with contextlib.suppress(ValueError):
                message = json.loads(text) if len(text) <= 4096 else None
                if isinstance(message, dict) and message.get("type") == "cancel":
                    await services.agent.cancel(session_id, services)
