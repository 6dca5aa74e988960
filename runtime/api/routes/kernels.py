"""A session's stateful Python kernels.

`POST /v1/sessions/{id}/kernels/{name}/execute {code, timeout_s?}` answers the kernel result
(`KernelResult`); with `?stream=true` the execution's events as SSE, as `/exec` does
(`tool_call`, live `exec_output`, then `tool_result`, or `error`). The execute is the tool
call `kernel_exec {code, kernel, timeout_s}` through `runtime.calls.SessionToolCall`, the
path every call takes (policy, audit, events, metrics). `GET /v1/sessions/{id}/kernels`
lists the session's kernels (running or saved); `DELETE .../kernels/{name}` stops one and
forgets its state (204; 404 when there is none).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Query, Request, Response, status
from fastapi.sse import EventSourceResponse

from runtime.api.deps import SessionUser, get_services, owned_session, subject_for
from runtime.api.exec_sse import execution_frames
from runtime.api.services import Services
from runtime.calls import CallRequest
from runtime.errors import NotFound
from runtime.executor import new_exec_id
from runtime.kernels import KernelExecuteBody, KernelInfo, KernelResult, check_kernel_name
from runtime.kernels.service import KernelService
from runtime.policy.decision import Subject
from runtime.tools import ToolResult

router = APIRouter(prefix="/v1/sessions", tags=["kernels"])


def _kernels(services: Services) -> KernelService:
    if services.kernels is None:
        raise NotFound("kernels do not run on this server (they need a Docker engine)")
    return services.kernels


def kernel_out(result: ToolResult, name: str, exec_id: str) -> KernelResult:
    """The tool's result as the kernel result (a refusal the tool reported: no run)."""
    run = result.execution
    said = result.metadata.get("kernel")
    if run is None or not isinstance(said, dict):
        return KernelResult(ok=False, stdout="", stderr=result.error or "", results=[],
                            error=None, execution_count=None, kernel=name, restored=[],
                            lost=[], duration_ms=0, exec_id=exec_id, audit_seq=None)
    return KernelResult.model_validate({**said, "stdout": run.stdout, "stderr": run.stderr})


async def _run(services: Services, subject: Subject, name: str, body: KernelExecuteBody,
               exec_id: str) -> KernelResult:
    args: dict[str, Any] = {"code": body.code, "kernel": name}
    if body.timeout_s is not None:
        args["timeout_s"] = body.timeout_s
    result = await services.calls(subject, CallRequest(tool="kernel_exec", args=args,
                                                       timeout_s=body.timeout_s,
                                                       exec_id=exec_id))
    return kernel_out(result, name, exec_id)


@router.post("/{session_id}/kernels/{name}/execute", response_model=KernelResult,
             responses={200: {"content": {"text/event-stream": {}}}})
async def execute(session_id: str, name: str, body: KernelExecuteBody, request: Request,
                  principal: SessionUser,
                  stream: bool = Query(False, description="answer the events as SSE")) -> Any:
    services = get_services(request)
    check_kernel_name(name)
    _kernels(services)
    record = await owned_session(services, principal, session_id)
    subject = await subject_for(services, principal, record)
    exec_id = new_exec_id()
    if not stream:
        return await _run(services, subject, name, body, exec_id)
    return EventSourceResponse(_stream(services, subject, name, body, exec_id))


@router.get("/{session_id}/kernels", response_model=list[KernelInfo])
async def list_kernels(session_id: str, request: Request, principal: SessionUser
                       ) -> list[KernelInfo]:
    services = get_services(request)
    record = await owned_session(services, principal, session_id)
    return await _kernels(services).list(await subject_for(services, principal, record))


@router.delete("/{session_id}/kernels/{name}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_kernel(session_id: str, name: str, request: Request, principal: SessionUser
                        ) -> Response:
    services = get_services(request)
    check_kernel_name(name)
    record = await owned_session(services, principal, session_id)
    await _kernels(services).delete(await subject_for(services, principal, record), name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


def _stream(services: Services, subject: Subject, name: str, body: KernelExecuteBody,
            exec_id: str) -> AsyncIterator[bytes]:
    """This execute's events from the session bus, then (on failure) an `error` event; a
    client that leaves interrupts the execute (names kept)."""
    return execution_frames(services.hub.bus(subject.session), exec_id,
                            lambda: _run(services, subject, name, body, exec_id),
                            _kernels(services).executor.kill)
