"""E2B's control API (what `E2B_API_URL` points at): sandboxes' life cycle.

`POST /v2/sandboxes`, `GET /v2/sandboxes` (pages: `limit`, `nextToken`; the next page's token
in the `x-next-token` header), `GET|DELETE /sandboxes/{id}`, `POST /sandboxes/{id}/timeout`,
`POST /v2/sandboxes/{id}/connect` (and the v1 spellings the SDK may use). The key is the
`X-API-KEY` header. What Navi does not offer (pause, resume, snapshots, fork, metrics, logs,
network updates, templates) answers 501 with a message saying so. Bodies are E2B's, errors
`{code, message}`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, Query, Request, Response

from runtime.e2b.auth import api_key
from runtime.e2b.errors import Unsupported
from runtime.e2b.sandboxes import NewSandbox, Sandboxes, TimeoutBody
from runtime.errors import InvalidInput

router = APIRouter()
MAX_PAGE = 100


def _sandboxes(request: Request) -> Sandboxes:
    return Sandboxes(request.app.state.get_services())


@router.post("/sandboxes", status_code=201)
@router.post("/v2/sandboxes", status_code=201)
async def create(request: Request, body: NewSandbox) -> dict[str, Any]:
    sandboxes = _sandboxes(request)
    principal = await api_key(sandboxes.services, request.headers)
    return await sandboxes.create(principal, body)


def _metadata_filter(raw: str | None) -> dict[str, str]:
    if not raw:
        return {}
    if len(raw) > 4096:
        raise InvalidInput("metadata filter too long")
    return dict(parse_qsl(raw, keep_blank_values=True))


@router.get("/v2/sandboxes")
@router.get("/sandboxes")
async def list_sandboxes(
    request: Request, response: Response,
    limit: int = Query(MAX_PAGE, ge=1, le=1000),
    nextToken: str | None = Query(None, max_length=64),  # noqa: N803 (E2B's name)
    metadata: str | None = Query(None, max_length=4096),
    state: str | None = Query(None, max_length=64),
) -> list[dict[str, Any]]:
    sandboxes = _sandboxes(request)
    principal = await api_key(sandboxes.services, request.headers)
    if state and "running" not in state.split(","):
        return []  # Navi's sandboxes are running or gone: never paused
    wanted = _metadata_filter(metadata)
    records = [r for r in await sandboxes.list(principal)
               if all(r.metadata.get(k) == v for k, v in wanted.items())]
    if nextToken:
        records = [r for r in records if r.session_id > nextToken]
    records.sort(key=lambda r: r.session_id)
    page, rest = records[:limit], records[limit:]
    if rest:
        response.headers["x-next-token"] = page[-1].session_id
    return [await sandboxes.listed(r) for r in page]


@router.get("/sandboxes/{sandbox_id}")
async def detail(request: Request, sandbox_id: str) -> dict[str, Any]:
    sandboxes = _sandboxes(request)
    principal = await api_key(sandboxes.services, request.headers)
    return await sandboxes.detail(principal, sandbox_id)


@router.delete("/sandboxes/{sandbox_id}", status_code=204)
async def kill(request: Request, sandbox_id: str) -> Response:
    sandboxes = _sandboxes(request)
    principal = await api_key(sandboxes.services, request.headers)
    await sandboxes.kill(principal, sandbox_id)
    return Response(status_code=204)


@router.post("/sandboxes/{sandbox_id}/timeout", status_code=204)
async def set_timeout(request: Request, sandbox_id: str, body: TimeoutBody) -> Response:
    sandboxes = _sandboxes(request)
    principal = await api_key(sandboxes.services, request.headers)
    await sandboxes.set_timeout(principal, sandbox_id, body.timeout)
    return Response(status_code=204)


@router.post("/sandboxes/{sandbox_id}/connect")
@router.post("/v2/sandboxes/{sandbox_id}/connect")
async def connect(request: Request, sandbox_id: str, body: TimeoutBody | None = None
                  ) -> dict[str, Any]:
    sandboxes = _sandboxes(request)
    principal = await api_key(sandboxes.services, request.headers)
    timeout = body.timeout if body is not None else 300
    return await sandboxes.connect(principal, sandbox_id, timeout)


_UNSUPPORTED = {
    "pause": "pausing a sandbox", "resume": "resuming a sandbox",
    "snapshots": "snapshots of a sandbox through the E2B API (Navi's own API has them)",
    "fork": "forking a sandbox through the E2B API (Navi's own API has it)",
    "refreshes": "refreshing a sandbox", "metrics": "sandbox metrics", "logs": "sandbox logs",
    "network": "changing a sandbox's network (Navi's policy decides egress)",
}


@router.api_route("/sandboxes/{sandbox_id}/{what}", methods=["GET", "POST", "PUT"])
@router.api_route("/v2/sandboxes/{sandbox_id}/{what}", methods=["GET", "POST", "PUT"])
async def unsupported(request: Request, sandbox_id: str, what: str) -> Response:
    sandboxes = _sandboxes(request)
    await api_key(sandboxes.services, request.headers)
    feature = _UNSUPPORTED.get(what, f"'{what}'")
    raise Unsupported(f"{feature} is not offered by Navi's E2B-compatible API")
