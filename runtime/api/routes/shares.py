"""Links made by `share_file` and `content_publish`, and their owners' view of them.

`GET /v1/shared/{token}` downloads the shared file and `GET /v1/published/{token}` shows a
published one, both WITHOUT a bearer token: the token in the path is the capability (only
its SHA-256 is stored, `runtime.store.shares`). The file is read at that moment through the
session's workspace (fd-relative, no links, as the sandbox uid). An unknown, expired or
revoked token, a gone session, or a file gone, made unreadable or replaced by a link or
directory: 404, the one answer for all. Both are streamed and hold their session until
their response ends (`runtime.api.held_response`); the server answers at most a few dozen
anonymous link requests at once and a link a few readers at once (429 past either).
Downloads are attachments with `nosniff`. Published HTML is never shown on the API's
origin: the API answers 307 to an origin of the page's own on the preview origin
(`runtime.api.published_origin`), which serves it under a CSP `sandbox` with no
`allow-same-origin` and `connect-src 'none'`, so no script in it can reach the API,
whatever frames it.

`GET /v1/sessions/{id}/shares` lists a session's live links (never their tokens) and
`DELETE /v1/sessions/{id}/shares/{share_id}` revokes one (audited `share.revoke`).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import mimetypes
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from fastapi import APIRouter, Request, Response, status
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from runtime.api.deps import SessionUser, get_services, owned_session, subject_for
from runtime.api.disposition import attachment
from runtime.api.held_response import HeldFileResponse, hold, wait_unheld
from runtime.errors import InvalidPath, NotFound, PermissionDenied
from runtime.store.shares import ShareKind, ShareRecord, ShareStore
from runtime.tools.builtin.image_view import sniff_image
from runtime.tools.builtin.share import MAX_PUBLISH_BYTES, PublishKind, publish_kind
from runtime.workspace.held_reads import HeldRead

if TYPE_CHECKING:
    from runtime.api.services import Services

router = APIRouter(tags=["shares"])

HTML_CSP = ("sandbox allow-scripts; default-src 'none'; img-src data:; "
            "style-src 'unsafe-inline'; script-src 'unsafe-inline'; connect-src 'none'; "
            "form-action 'none'; base-uri 'none'")
LOCKED_CSP = "sandbox; default-src 'none'"
BASE_HEADERS = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store",
                "Referrer-Policy": "no-referrer"}
GONE = "no such link (unknown, expired or revoked)"
PUBLISHED_LABEL_RE = re.compile(r"^[a-z2-7]{52}$")


class ShareOut(BaseModel):
    id: str
    kind: ShareKind
    path: str
    created_at: float
    expires_at: float | None
    downloads: int


@contextlib.contextmanager
def _gone_unless_readable() -> Iterator[None]:
    """A file the sandbox made unreadable or turned into a link or directory is as gone as
    a deleted one: the link's holder is told nothing more (404, not 403/400)."""
    try:
        yield
    except (PermissionDenied, InvalidPath):
        raise NotFound(GONE) from None


async def _open_link(request: Request, token: str, kind: ShareKind, *,
                     max_bytes: int | None = None, count: bool = True
                     ) -> tuple[ShareRecord, HeldRead]:
    """The live link's file, open and held (its session's lease, a slot among the server's
    anonymous link requests and among the link's readers) until its response ends."""
    return await open_link(get_services(request), token, kind, max_bytes=max_bytes,
                           count=count)


async def open_link(services: Services, token: str, kind: ShareKind, *,
                    max_bytes: int | None = None, count: bool = True
                    ) -> tuple[ShareRecord, HeldRead]:
    """``_open_link`` for a caller without a request (the preview origin's published
    pages); ``count``: counted as a read now (else the caller counts it once it knows it
    is one: a redirect is not)."""
    releases: list[Callable[[], None]] = [services.reads.enter_anonymous()]
    try:
        share = await ShareStore(services.store).by_token(token, kind)
        if share is None:
            raise NotFound(GONE)
        releases.append(services.reads.enter_link(share.id))
        await wait_unheld(services, share.tenant_id, share.session_id)
        node = await services.nodes.of_session(share.tenant_id, share.session_id)
        ws = await asyncio.to_thread(node.open, share.tenant_id, share.session_id)
        releases.insert(0, ws.close)
        with _gone_unless_readable():
            reader = await asyncio.to_thread(ws.open_read, share.path)
        releases.insert(0, reader.close)
        if max_bytes is not None and reader.size > max_bytes:
            raise NotFound(f"{share.path} is now larger than {max_bytes} bytes")
        if count:
            await ShareStore(services.store).count_download(share.id)
    except BaseException:
        for release in releases:
            release()
        raise
    releases.pop(0)  # the reader: the held read closes it

    def release_all() -> None:
        for release in releases:
            release()

    return share, hold(services.reads, share.tenant_id, share.session_id, release_all,
                       reader)


@router.get("/v1/shared/{token}", response_class=StreamingResponse,
            responses={200: {"content": {"application/octet-stream": {}}}})
async def download_shared(token: str, request: Request) -> StreamingResponse:
    share, held = await _open_link(request, token, "share")
    name = share.path.rsplit("/", 1)[-1]
    media_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    return HeldFileResponse(held, send_timeout_s=get_services(request).settings.send_timeout_s,
                            media_type=media_type, headers={
                                **BASE_HEADERS, "Content-Disposition": attachment(name),
                                "Content-Security-Policy": LOCKED_CSP})


@router.get("/v1/published/{token}", response_class=StreamingResponse,
            responses={200: {"content": {"text/html": {}, "image/png": {}}},
                       307: {"description": "an HTML page: shown on its own origin"}})
async def view_published(token: str, request: Request) -> Response:
    """Streamed like a download (a few chunks in memory per reader, never the file). An
    HTML page is never shown on the API's origin: 307 to its own on the preview origin."""
    services = get_services(request)
    share, held, kind, head = await open_published(services, token)
    if kind == "html":
        held.close()
        ports = services.ports
        if ports is None or ports.origin is None:
            raise NotFound("published pages are shown on the preview origin, which this "
                           "server does not run")
        return Response(status_code=status.HTTP_307_TEMPORARY_REDIRECT, headers={
            **BASE_HEADERS, "Location": ports.links.url_for(published_label(token))})
    await ShareStore(services.store).count_download(share.id)
    return published_response(services, held, kind, head)


async def open_published(services: Services, token: str
                         ) -> tuple[ShareRecord, HeldRead, PublishKind, bytes]:
    """A live publish link's file, open and held, what it is and its first bytes (not yet
    counted as a read)."""
    share, held = await open_link(services, token, "publish", max_bytes=MAX_PUBLISH_BYTES,
                                  count=False)
    try:
        head = await asyncio.to_thread(held.chunk, 64)  # what the kind is told by
        kind = publish_kind(share.path, head[:16])
        if kind is None:
            raise NotFound(f"{share.path} is no longer something that can be shown")
    except BaseException:
        held.close()
        raise
    return share, held, kind, head


def published_response(services: Services, held: HeldRead, kind: PublishKind, head: bytes
                       ) -> StreamingResponse:
    headers = {**BASE_HEADERS, "Content-Security-Policy": LOCKED_CSP}
    if kind == "image":
        media_type = sniff_image(head) or "application/octet-stream"
    elif kind == "pdf":  # the browser's PDF viewer does not run in a sandboxed document
        media_type = "application/pdf"
        headers["Content-Security-Policy"] = "default-src 'none'; object-src 'self'"
    elif kind == "html":
        media_type = "text/html; charset=utf-8"
        headers["Content-Security-Policy"] = HTML_CSP
    else:
        media_type = "text/markdown; charset=utf-8"
    return HeldFileResponse(held, send_timeout_s=services.settings.send_timeout_s,
                            media_type=media_type, headers=headers, prefix=head)


def published_label(token: str) -> str:
    """The host label of a published page's own origin: the token's 32 bytes in base32
    (52 characters; a preview link's label has 26), so no two pages share an origin."""
    raw = _token_bytes(token)
    return base64.b32encode(raw).decode().rstrip("=").lower() if raw else "-"


def token_of_label(label: str) -> str | None:
    """``published_label``'s token back, or None for a label that is not one."""
    if not PUBLISHED_LABEL_RE.fullmatch(label):
        return None
    raw = base64.b32decode(label.upper() + "====")
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _token_bytes(token: str) -> bytes | None:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == 32 else None


@router.get("/v1/sessions/{session_id}/shares", response_model=list[ShareOut])
async def list_shares(session_id: str, request: Request, principal: SessionUser
                      ) -> list[ShareOut]:
    services = get_services(request)
    await owned_session(services, principal, session_id)
    rows = await ShareStore(services.store).list(principal.tenant_id, session_id)
    return [ShareOut(**r.model_dump()) for r in rows]


@router.delete("/v1/sessions/{session_id}/shares/{share_id}",
               status_code=status.HTTP_204_NO_CONTENT)
async def revoke_share(session_id: str, share_id: str, request: Request,
                       principal: SessionUser) -> Response:
    services = get_services(request)
    record = await owned_session(services, principal, session_id)
    shares = ShareStore(services.store)
    found = await shares.get(principal.tenant_id, session_id, share_id)
    if found is None:
        raise NotFound("no such link in this session")
    subject = await subject_for(services, principal, record)
    await services.executor.record_action(subject, "share.revoke", found.id,
                                          rule=f"roles.{principal.role}", detail=found.path)
    await shares.revoke(found.id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
