"""The tools a caller may use (policy-filtered), their JSON schemas and their manuals."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request
from fastapi.responses import PlainTextResponse

from runtime.api.deps import SessionUser, get_services, owned_session, subject_for
from runtime.api.schemas import ToolOut
from runtime.policy.decision import Subject

router = APIRouter(prefix="/v1", tags=["tools"])


async def _subject(request: Request, principal: SessionUser, session: str | None) -> Subject:
    services = get_services(request)
    record = await owned_session(services, principal, session) if session else None
    return await subject_for(services, principal, record)


@router.get("/tools", response_model=list[ToolOut])
async def list_tools(request: Request, principal: SessionUser,
                     session: str | None = Query(None, description="use this session's profile")
                     ) -> list[ToolOut]:
    subject = await _subject(request, principal, session)
    specs = await get_services(request).tools.registry.specs(subject)
    return [ToolOut(**spec.model_dump()) for spec in specs]


@router.get("/tools/{name}", response_model=ToolOut)
async def get_tool(name: str, request: Request, principal: SessionUser,
                   session: str | None = Query(None)) -> ToolOut:
    subject = await _subject(request, principal, session)
    spec = await get_services(request).tools.registry.spec(name, subject)
    return ToolOut(**spec.model_dump())


@router.get("/manuals/{name}", response_class=PlainTextResponse,
            responses={200: {"content": {"text/markdown": {}}}})
async def get_manual(name: str, request: Request, principal: SessionUser) -> PlainTextResponse:
    subject = await _subject(request, principal, None)
    text = await get_services(request).tools.registry.manual(name, subject)
    return PlainTextResponse(text, media_type="text/markdown; charset=utf-8")
