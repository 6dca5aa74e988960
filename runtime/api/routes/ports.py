"""A session's ports from outside, only through Navi, and its preview links.

`/v1/sessions/{id}/ports/{port}/{path}` (any method, WebSocket too) forwards to a port a
running process of the session declared, with the session owner's token (stripped, with every
other credential, before the program sees the request); 404 when no running process declares
the port, 502 `port_unreachable` while nothing listens. `POST /v1/sessions/{id}/previews
{port, expires_in_s?}` → 201 `{id, url, port, expires_at}`; `GET` lists the live ones;
`DELETE .../previews/{link_id}` → 204. Links are audited `port.link`. The work is
`runtime.ports`.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from fastapi import APIRouter, Request, Response, WebSocket, status
from pydantic import Field

from runtime.api.deps import (
    SESSION_ROLES,
    SessionUser,
    actor,
    authenticate,
    bearer_token,
    get_services,
    owned_session,
    subject_for,
)
from runtime.api.schemas import StrictBody
from runtime.api.services import Services
from runtime.errors import Forbidden, NotFound, PolicyDenied
from runtime.policy.decision import Subject
from runtime.ports.hub import PORT_MAX, PORT_MIN
from runtime.ports.previews import DEFAULT_EXPIRES_S, MAX_EXPIRES_S, PreviewOut
from runtime.ports.service import PortsService
from runtime.sessions.principal import Principal
from runtime.store import SessionRecord

router = APIRouter(prefix="/v1/sessions", tags=["ports"])
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


class PreviewCreate(StrictBody):
    port: int = Field(ge=PORT_MIN, le=PORT_MAX)
    expires_in_s: int = Field(DEFAULT_EXPIRES_S, ge=1, le=MAX_EXPIRES_S,
                              description="seconds the link works (default 1 h, at most 24 h)")


def _ports(services: Services) -> PortsService:
    if services.ports is None:
        raise NotFound("session ports are not served here")
    return services.ports


async def _allowed(services: Services, principal: Principal, record: SessionRecord
                   ) -> Subject:
    """The session's policy subject, if its profile lets processes declare ports."""
    subject = await subject_for(services, principal, record)
    limits = services.policy.session_limits(subject)
    if not limits.ports:
        raise PolicyDenied(f"ports are off for profile {subject.profile!r} "
                           f"({limits.ports_rule})", rule=limits.ports_rule)
    return subject


def _raw_path(scope: MutableMapping[str, Any], decoded: str) -> str:
    """The path after ``/ports/<port>`` as the client sent it (still percent-encoded)."""
    raw = scope.get("raw_path")
    if isinstance(raw, bytes):
        parts = raw.split(b"?", 1)[0].split(b"/", 6)
        if len(parts) == 7:
            return "/" + parts[6].decode("latin-1")
        return "/"
    return "/" + decoded


def _declared(ports: PortsService, session: str, port: int) -> str:
    process_id = ports.hub.running_port(session, port)
    if process_id is None:
        raise NotFound(f"no running process of this session declares port {port}")
    return process_id


@router.api_route("/{session_id}/ports/{port}/{path:path}", methods=METHODS,
                  include_in_schema=False)
async def port_http(session_id: str, port: int, path: str, request: Request,
                    principal: SessionUser) -> Response:
    services = get_services(request)
    record = await owned_session(services, principal, session_id)
    await _allowed(services, principal, record)
    ports = _ports(services)
    _declared(ports, record.id, port)

    async def opener(p: int):  # type: ignore[no-untyped-def]
        return await ports.hub.open(record.id, p)

    await ports.proxy.http(request.scope, request.receive, request._send,  # noqa: SLF001
                           session=record.id, port=port, path=_raw_path(request.scope, path),
                           opener=opener)
    return _Sent()


class _Sent(Response):
    """The proxy answered through ASGI itself: nothing more to send."""

    def __init__(self) -> None:
        super().__init__()

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        return None


@router.websocket("/{session_id}/ports/{port}/{path:path}")
async def port_websocket(websocket: WebSocket, session_id: str, port: int, path: str) -> None:
    services: Services = websocket.app.state.services
    try:
        principal = await authenticate(services, bearer_token(
            websocket.headers.get("authorization")))
        if principal.role not in SESSION_ROLES:
            raise Forbidden("this needs a session role")
        record = await owned_session(services, principal, session_id)
        await _allowed(services, principal, record)
        ports = _ports(services)
        _declared(ports, record.id, port)
    except Exception:  # refused: the client sees the handshake fail
        await websocket.close(code=1008)
        return

    async def opener(p: int):  # type: ignore[no-untyped-def]
        return await ports.hub.open(record.id, p)

    await ports.proxy.websocket(websocket.scope, websocket.receive, websocket.send, port=port,
                                path=_raw_path(websocket.scope, path), opener=opener)


@router.post("/{session_id}/previews", response_model=PreviewOut,
             status_code=status.HTTP_201_CREATED)
async def create_preview(session_id: str, body: PreviewCreate, request: Request,
                         principal: SessionUser) -> PreviewOut:
    services = get_services(request)
    record = await owned_session(services, principal, session_id)
    subject = await _allowed(services, principal, record)
    ports = _ports(services)
    process_id = _declared(ports, record.id, body.port)
    link_id_hint = f"port {body.port} of {process_id}"
    link = await ports.links.create(tenant=principal.tenant_id, session=record.id, port=body.port,
                                    process_id=process_id, token_id=principal.token_id,
                                    expires_in_s=body.expires_in_s)
    try:
        await services.executor.record_action(
            actor(principal, principal.tenant_id, record.id), "port.link", link.id,
            rule=services.policy.session_limits(subject).ports_rule,
            detail=f"create {link_id_hint}, expires in {body.expires_in_s} s")
    except BaseException:
        await ports.links.revoke(link)  # not audited: it never worked
        raise
    return ports.links.out(link)


@router.get("/{session_id}/previews", response_model=list[PreviewOut])
async def list_previews(session_id: str, request: Request, principal: SessionUser
                        ) -> list[PreviewOut]:
    services = get_services(request)
    record = await owned_session(services, principal, session_id)
    ports = _ports(services)
    return [ports.links.out(link) for link in ports.links.list(record.id, principal.tenant_id)
            if ports.hub.running_port(record.id, link.port) == link.process_id]


@router.delete("/{session_id}/previews/{link_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_preview(session_id: str, link_id: str, request: Request,
                         principal: SessionUser) -> Response:
    services = get_services(request)
    record = await owned_session(services, principal, session_id)
    ports = _ports(services)
    link = ports.links.get(record.id, principal.tenant_id, link_id)
    await services.executor.record_action(
        actor(principal, principal.tenant_id, record.id), "port.link", link.id,
        rule=f"roles.{principal.role}", detail=f"revoke port {link.port}")
    await ports.links.revoke(link)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
