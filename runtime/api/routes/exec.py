"""Direct tool execution in a session, under the same policy, audit and sandbox as the agent.

`POST /v1/sessions/{id}/exec` answers the exec result (docs/api.md). With `?stream=true` it answers
the execution's events as SSE instead (`tool_call`, live `exec_output`, then `tool_result`
carrying the same result fields, or `error`). Either way every event also goes to the
session's bus, so `GET /v1/sessions/{id}/events` watchers see the run live, from the moment
the tool is found and its arguments are valid: a refused request publishes nothing, and
`tool_call` carries at most 64 KiB of arguments (`runtime.tools.event_args`). The call itself
is `runtime.calls.SessionToolCall`'s, the same path the agent's calls take; this module only
maps its typed result onto the response.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.sse import EventSourceResponse

from runtime.api.deps import SessionUser, get_services, owned_session, subject_for
from runtime.api.exec_sse import execution_frames
from runtime.api.schemas import ExecBody, ExecOut
from runtime.api.services import Services
from runtime.calls import CallRequest, Execution
from runtime.executor import new_exec_id
from runtime.policy.decision import Subject
from runtime.tools import ToolResult

router = APIRouter(prefix="/v1/sessions", tags=["exec"])

_EXEC_KEYS = frozenset(Execution.model_fields)


def exec_out(result: ToolResult, exec_id: str) -> ExecOut:
    """The exec result: a sandboxed run's typed `execution` as it is; a tool that ran no
    program maps onto the same fields (its output as stdout, `ok` its success)."""
    run = result.execution
    if run is not None:  # what the tool says beyond its run (e.g. a fetched body's `truncated`)
        said = run.model_dump()
        meta = {k: v for k, v in result.metadata.items() if k not in said or said[k] != v}
        return ExecOut(**{**said, "exec_id": exec_id}, output=result.output or None,
                       error=result.error, metadata=meta)
    meta = {k: v for k, v in result.metadata.items() if k not in _EXEC_KEYS}
    return ExecOut(ok=result.success, exit_code=None, stdout=result.output,
                   stderr=result.error or "", timed_out=False, oom_killed=False, truncated=False,
                   duration_ms=0, exec_id=exec_id, audit_seq=None, output=result.output,
                   error=result.error, metadata=meta)


async def _run(services: Services, subject: Subject, body: ExecBody, exec_id: str) -> ExecOut:
    result = await services.calls(subject, CallRequest(tool=body.tool, args=body.args,
                                                       timeout_s=body.timeout_s,
                                                       exec_id=exec_id))
    return exec_out(result, exec_id)


@router.post("/{session_id}/exec", response_model=ExecOut,
             responses={200: {"content": {"text/event-stream": {}}}})
async def exec_tool(
    session_id: str, body: ExecBody, request: Request, principal: SessionUser,
    stream: bool = Query(False, description="answer the execution's events as SSE"),
) -> Any:
    services = get_services(request)
    record = await owned_session(services, principal, session_id)
    subject = await subject_for(services, principal, record)
    exec_id = new_exec_id()
    if not stream:
        return await _run(services, subject, body, exec_id)
    return EventSourceResponse(_stream(services, subject, body, exec_id))


def _stream(services: Services, subject: Subject, body: ExecBody, exec_id: str
            ) -> AsyncIterator[bytes]:
    """This execution's events from the session bus, then (on failure) an `error` event."""
    return execution_frames(services.hub.bus(subject.session), exec_id,
                            lambda: _run(services, subject, body, exec_id),
                            services.executor.kill)
