"""Session files over HTTP. Every byte goes through `runtime.workspace` (fd-relative, no links).

Bodies are raw bytes (`application/octet-stream`); the listing is `[{path, size, mtime}]`.
A path is workspace-relative, or absolute under `/tmp/` for the session's persistent /tmp
(URL `/files/%2Ftmp/x` or `/files//tmp/x`; `runtime.workspace.tmpdir`). Every operation acts
as the sandbox uid: what the sandbox made unreadable or read-only is 403 `permission_denied`.
Uploads stream to disk with the size checked as they arrive (413 past the limit); downloads
stream from an fd opened beneath the workspace, holding the session until the response ends
(`runtime.api.held_response`: cut when the client stalls or the session is deleted or
restored). Never `docker cp` from a live container.
"""

from __future__ import annotations

import asyncio
from functools import partial

from fastapi import APIRouter, Query, Request, Response, status
from fastapi.responses import StreamingResponse

from runtime.api.deps import SessionUser, get_services, owned_session, subject_for
from runtime.api.disposition import attachment
from runtime.api.held_response import HeldFileResponse, hold, wait_unheld
from runtime.api.schemas import FileEntryOut
from runtime.audit.records import StateChange
from runtime.errors import InvalidInput
from runtime.nodes import OpenFiles
from runtime.workspace import disk_io
from runtime.workspace.tmpdir import Root, shown, split_root

router = APIRouter(prefix="/v1/sessions", tags=["files"])


async def _workspace(request: Request, principal: SessionUser, session_id: str,
                     root: Root = "workspace") -> OpenFiles:
    services = get_services(request)
    node = services.nodes.for_session(await owned_session(services, principal, session_id))
    await wait_unheld(services, principal.tenant_id, session_id)  # not in a pool thread
    return await asyncio.to_thread(partial(node.open, principal.tenant_id,
                                           session_id, root=root))


async def _record(request: Request, principal: SessionUser, session_id: str,
                  action: StateChange, path: str) -> None:
    """Audit a file change before it is made (fail closed: no record, no change)."""
    services = get_services(request)
    record = await owned_session(services, principal, session_id)
    subject = await subject_for(services, principal, record)
    await services.executor.record_action(subject, action, path,
                                          rule=f"roles.{principal.role}")


@router.get("/{session_id}/files", response_model=list[FileEntryOut])
async def list_files(session_id: str, request: Request, principal: SessionUser,
                     path: str = Query("", max_length=1024, description=(
                         "list only under this directory (workspace-relative, or /tmp)"))
                     ) -> list[FileEntryOut]:
    root, rel = split_root(path)
    ws = await _workspace(request, principal, session_id, root)
    try:
        entries = await asyncio.to_thread(ws.list, rel)
    finally:
        ws.close()
    return [FileEntryOut(path=shown(root, e.path), size=e.size, mtime=e.mtime)
            for e in entries]


@router.get("/{session_id}/files/{path:path}", response_class=StreamingResponse,
            responses={200: {"content": {"application/octet-stream": {}}}})
async def download(session_id: str, path: str, request: Request, principal: SessionUser
                   ) -> StreamingResponse:
    root, rel = split_root(path)
    services = get_services(request)
    ws = await _workspace(request, principal, session_id, root)
    try:
        reader = await asyncio.to_thread(ws.open_read, rel)
    except BaseException:
        ws.close()
        raise
    # the file and the session's lease stay open until the response has ended (or is cut)
    held = hold(services.reads, principal.tenant_id, session_id, ws, reader)
    return HeldFileResponse(
        held, send_timeout_s=services.settings.send_timeout_s,
        media_type="application/octet-stream",
        headers={"Content-Disposition": attachment(path.rsplit("/", 1)[-1]),
                 "X-Content-Type-Options": "nosniff"},
    )


@router.put("/{session_id}/files/{path:path}", response_model=FileEntryOut,
            status_code=status.HTTP_201_CREATED,
            openapi_extra={"requestBody": {"content": {"application/octet-stream": {
                "schema": {"type": "string", "format": "binary"}}}, "required": True}})
async def upload(session_id: str, path: str, request: Request, principal: SessionUser
                 ) -> FileEntryOut:
    length_header = request.headers.get("content-length")
    expected: int | None = None
    if length_header is not None:
        if not (length_header.isascii() and length_header.isdigit()) or len(length_header) > 18:
            raise InvalidInput("bad Content-Length")
        expected = int(length_header)
    services = get_services(request)
    quotas = services.policy.quotas(await services.tenants.name(principal.tenant_id))
    root, rel = split_root(path)
    ws = await _workspace(request, principal, session_id, root)
    try:
        writer = await asyncio.to_thread(partial(ws.writer, rel, expected_size=expected,
                                                 max_bytes=quotas.upload_mb * 1024 * 1024))
        entry = await disk_io.fill(writer, request.stream(), first=lambda: _record(
            request, principal, session_id, "file.write", shown(root, writer.shown)))
    finally:
        ws.close()
    return FileEntryOut(path=shown(root, entry.path), size=entry.size, mtime=entry.mtime)


@router.delete("/{session_id}/files/{path:path}", status_code=status.HTTP_204_NO_CONTENT)
async def delete(session_id: str, path: str, request: Request, principal: SessionUser) -> Response:
    root, rel = split_root(path)
    ws = await _workspace(request, principal, session_id, root)
    try:
        found = (await asyncio.to_thread(ws.stat, rel)).path  # 404 before anything is recorded
        if not found:
            raise InvalidInput("invalid path: the workspace or /tmp itself cannot be deleted")
        await _record(request, principal, session_id, "file.delete", shown(root, found))
        await asyncio.to_thread(ws.delete, rel)
    finally:
        ws.close()
    return Response(status_code=status.HTTP_204_NO_CONTENT)
