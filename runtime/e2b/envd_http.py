"""envd's plain HTTP routes: `GET /health`, `GET /files` (download), `POST /files` (upload).

Reached on the one Navi address with the `E2b-Sandbox-Id` header naming the sandbox. Every
route needs the sandbox's access token (`runtime.e2b.auth`). Downloads stream from an fd
opened beneath the session's disk, holding its lease as `/v1` downloads do; uploads stream
to disk, multipart (`uploads`) or raw `application/octet-stream` with `?path=`, under the
tenant's upload limit. Answers `[{name, type, path}]` for uploads; errors are
`{code, message}`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import StreamingResponse

from runtime.api.disposition import attachment
from runtime.api.held_response import HeldFileResponse, hold
from runtime.e2b.auth import sandbox_caller
from runtime.e2b.files import Entry, SandboxFiles
from runtime.e2b.paths import MAX_PATH
from runtime.e2b.uploads import parts
from runtime.errors import InvalidInput

router = APIRouter()


def _services(request: Request) -> Any:
    return request.app.state.get_services()


@router.get("/health")
async def health(request: Request) -> Response:
    """204 while the sandbox exists (the SDK's `is_running()`); its token is required."""
    await sandbox_caller(_services(request), request.headers)
    return Response(status_code=204)


@router.get("/files")
async def download(request: Request, path: str = Query(..., max_length=MAX_PATH),
                   username: str | None = Query(None, max_length=64)) -> StreamingResponse:
    """Streamed; the session stays leased until the response has ended, and a session
    deleted meanwhile (or a reader too slow for `NAVI_SEND_TIMEOUT_S`) cuts it."""
    services = _services(request)
    caller = await sandbox_caller(services, request.headers)
    opened, reader = await SandboxFiles(caller).open_read(path)
    held = hold(services.reads, caller.principal.tenant_id, caller.session.id, opened, reader)
    return HeldFileResponse(
        held, send_timeout_s=services.settings.send_timeout_s,
        media_type="application/octet-stream",
        headers={"Content-Disposition": attachment(path.rsplit("/", 1)[-1] or "file"),
                 "X-Content-Type-Options": "nosniff"})


def _written(entry: Entry) -> dict[str, str]:
    return {"name": entry.name, "type": "file", "path": entry.path}


async def _body(request: Request) -> AsyncIterator[bytes]:
    async for chunk in request.stream():
        yield chunk


@router.post("/files")
async def upload(request: Request, path: str | None = Query(None, max_length=MAX_PATH),
                 username: str | None = Query(None, max_length=64)) -> list[dict[str, str]]:
    files = SandboxFiles(await sandbox_caller(_services(request), request.headers))
    if request.headers.get("content-encoding", "identity") != "identity":
        raise InvalidInput("compressed uploads are not accepted: send them uncompressed")
    content_type = request.headers.get("content-type", "")
    if any(request.headers.get(h) for h in request.headers if h.startswith("x-metadata-")):
        raise InvalidInput("file metadata is not supported by Navi's E2B API")
    if content_type.startswith("application/octet-stream"):
        if not path:
            raise InvalidInput("?path= is required for an octet-stream upload")
        length = request.headers.get("content-length")
        expected = int(length) if length and length.isdigit() and len(length) < 19 else None
        return [_written(await files.write(path, _body(request), expected))]
    written: list[dict[str, str]] = []
    async for name, chunks in parts(content_type, _body(request)):
        target = path if path and not written else name
        if not target:
            raise InvalidInput("each uploaded file needs its path as the part's filename")
        written.append(_written(await files.write(target, chunks)))
    if not written:
        raise InvalidInput("no file in the upload")
    return written
