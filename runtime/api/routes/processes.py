"""A session's background processes.

`POST /v1/sessions/{id}/processes {command, cwd?, env?, name?, ports?}` → 201, the process;
`GET .../processes` lists them (oldest first, ended ones kept while the session lives);
`GET .../processes/{pid}`; `GET .../processes/{pid}/output?since=N` → `{output, next, first,
state, exit_code}` (at most 1 MiB per answer); `POST .../processes/{pid}/input {data, eof?}`
(`eof`: then its stdin is closed);
`POST .../processes/{pid}/signal {signal}`; `DELETE .../processes/{pid}` stops it (TERM,
KILL after 5 s) → 204. Another tenant's session or process is a plain 404. The work is
`runtime.processes.ProcessService`'s; a process started here ends when the token that
started it is revoked or expires.
"""

from __future__ import annotations

from fastapi import APIRouter, Query, Request, Response, status
from pydantic import Field

from runtime.api.deps import SessionUser, get_services, owned_session, subject_for
from runtime.api.schemas import StrictBody
from runtime.policy.decision import Subject
from runtime.processes import ProcessInfo, ProcessOutput, ProcessService, StartSpec
from runtime.processes.models import MAX_COMMAND, MAX_NAME, MAX_PORTS, SignalName

router = APIRouter(prefix="/v1/sessions", tags=["processes"])
MAX_INPUT = 1024 * 1024


class ProcessCreate(StrictBody):
    command: str = Field(min_length=1, max_length=MAX_COMMAND)
    cwd: str | None = Field(None, max_length=1024)
    env: dict[str, str] = Field(default_factory=dict, max_length=256)
    name: str | None = Field(None, min_length=1, max_length=MAX_NAME)
    ports: list[int] = Field(default_factory=list, max_length=MAX_PORTS)


class InputBody(StrictBody):
    data: str = Field(max_length=MAX_INPUT, description="text written to the process's stdin")
    eof: bool = Field(False, description="then close its stdin (the program reads EOF)")


class SignalBody(StrictBody):
    signal: SignalName


async def _context(request: Request, principal: SessionUser, session_id: str
                   ) -> tuple[ProcessService, Subject]:
    services = get_services(request)
    record = await owned_session(services, principal, session_id)
    return services.processes, await subject_for(services, principal, record)


@router.post("/{session_id}/processes", response_model=ProcessInfo,
             status_code=status.HTTP_201_CREATED)
async def start_process(session_id: str, body: ProcessCreate, request: Request,
                        principal: SessionUser) -> ProcessInfo:
    processes, subject = await _context(request, principal, session_id)
    services = get_services(request)
    return await processes.start(
        subject, StartSpec(**body.model_dump()), token_expires_at=principal.expires_at,
        approver=services.approver_for(services.hub.bus(subject.session)))


@router.get("/{session_id}/processes", response_model=list[ProcessInfo])
async def list_processes(session_id: str, request: Request, principal: SessionUser
                         ) -> list[ProcessInfo]:
    processes, subject = await _context(request, principal, session_id)
    return await processes.list(subject)


@router.get("/{session_id}/processes/{process_id}", response_model=ProcessInfo)
async def get_process(session_id: str, process_id: str, request: Request,
                      principal: SessionUser) -> ProcessInfo:
    processes, subject = await _context(request, principal, session_id)
    return await processes.get(subject, process_id)


@router.get("/{session_id}/processes/{process_id}/output", response_model=ProcessOutput)
async def process_output(session_id: str, process_id: str, request: Request,
                         principal: SessionUser,
                         since: int = Query(0, ge=0, le=2**62)) -> ProcessOutput:
    processes, subject = await _context(request, principal, session_id)
    return await processes.output(subject, process_id, since)


@router.post("/{session_id}/processes/{process_id}/input",
             status_code=status.HTTP_204_NO_CONTENT)
async def process_input(session_id: str, process_id: str, body: InputBody, request: Request,
                        principal: SessionUser) -> Response:
    processes, subject = await _context(request, principal, session_id)
    if body.data or not body.eof:
        await processes.input(subject, process_id, body.data.encode("utf-8", "surrogatepass"))
    if body.eof:
        await processes.close_stdin(subject, process_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{session_id}/processes/{process_id}/signal",
             status_code=status.HTTP_204_NO_CONTENT)
async def process_signal(session_id: str, process_id: str, body: SignalBody,
                         request: Request, principal: SessionUser) -> Response:
    processes, subject = await _context(request, principal, session_id)
    await processes.signal(subject, process_id, body.signal)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.delete("/{session_id}/processes/{process_id}", status_code=status.HTTP_204_NO_CONTENT)
async def stop_process(session_id: str, process_id: str, request: Request,
                       principal: SessionUser) -> Response:
    processes, subject = await _context(request, principal, session_id)
    await processes.stop(subject, process_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
