"""Direct tool execution in a session, under the same policy, audit and sandbox as the agent.

`POST /v1/sessions/{id}/exec` answers DESIGN's exec result. With `?stream=true` it answers
the execution's events as SSE instead (`tool_call`, live `exec_output`, then `tool_result`
carrying the same result fields, or `error`). Either way every event also goes to the
session's bus, so `GET /v1/sessions/{id}/events` watchers see the run live, from the moment
the tool is found and its arguments are valid: a refused request publishes nothing, and
`tool_call` carries at most 64 KiB of arguments (`runtime.tools.event_args`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.sse import EventSourceResponse, format_sse_event

from runtime.agent.live_output import LiveOutput as _LiveOutput
from runtime.api.deps import SessionUser, get_services, owned_session, subject_for
from runtime.api.errors import status_for
from runtime.api.schemas import ExecBody, ExecOut
from runtime.api.services import Services
from runtime.errors import NaviError, PolicyDenied
from runtime.executor import new_exec_id
from runtime.policy.decision import Subject
from runtime.tools import ToolContext, ToolResult
from runtime.tools.event_args import event_args

router = APIRouter(prefix="/v1/sessions", tags=["exec"])

EXEC_FIELDS = ("exit_code", "stdout", "stderr", "timed_out", "oom_killed", "truncated",
               "duration_ms", "audit_seq", "timeout_s", "runtime")


def exec_out(result: ToolResult, exec_id: str) -> ExecOut:
    """Sandboxed tools carry the execution's fields in `metadata`; others map onto them."""
    meta = dict(result.metadata)
    if "exit_code" in meta:
        fields = {k: meta.pop(k) for k in EXEC_FIELDS if k in meta}
        ok = (fields.get("exit_code") == 0 and not fields.get("timed_out")
              and not fields.get("oom_killed"))
        meta.pop("exec_id", None)
        return ExecOut(ok=ok, exec_id=exec_id, output=result.output or None, metadata=meta,
                       error=result.error,
                       **{"stdout": "", "stderr": "", "timed_out": False, "oom_killed": False,
                          "truncated": False, "duration_ms": 0, "audit_seq": None, **fields})
    return ExecOut(ok=result.success, exit_code=None, stdout=result.output,
                   stderr=result.error or "", timed_out=False, oom_killed=False, truncated=False,
                   duration_ms=0, exec_id=exec_id, audit_seq=None, output=result.output,
                   error=result.error, metadata=meta)


async def _run(services: Services, subject: Subject, body: ExecBody, exec_id: str) -> ExecOut:
    bus = services.hub.bus(subject.session)
    registry = services.tools.registry
    builtins = registry.builtin_names()
    workspace_path = await asyncio.to_thread(services.workspaces.verify, subject.tenant,
                                             subject.session)
    workspace = await asyncio.to_thread(services.workspaces.open, subject.tenant, subject.session)
    ctx = ToolContext(subject=subject, workspace=workspace, workspace_path=workspace_path,
                      executor=services.executor, on_output=_LiveOutput(bus, exec_id),
                      timeout_s=body.timeout_s, exec_id=exec_id,
                      approver=services.approver_for(bus))
    try:
        try:
            tool, params = await registry.check(body.tool, body.args, ctx)
        except NaviError as exc:  # no such tool or bad arguments: nothing is announced
            _count_failure(services, services.metrics.tool_label(body.tool, builtins, found=False),
                           exc)
            raise
        label = services.metrics.tool_label(body.tool, builtins, found=True)
        shown = await asyncio.to_thread(event_args, body.args)  # linear in their size
        bus.publish("tool_call", tool=body.tool, args=shown, exec_id=exec_id)
        services.metrics.active.inc()
        try:
            result = await registry.run(tool, params, ctx)
        except NaviError as exc:
            _count_failure(services, label, exc)
            extra = {"rule": exc.rule} if isinstance(exc, PolicyDenied) else {"code": exc.code}
            bus.publish("tool_result", tool=body.tool, exec_id=exec_id, success=False,
                        output="", error=exc.message, **extra)
            raise
        finally:
            services.metrics.active.dec()
    finally:
        workspace.close()
    out = exec_out(result, exec_id)
    outcome = "ok" if out.ok else ("timeout" if out.timed_out else
                                   "oom" if out.oom_killed else "failed")
    services.metrics.executions.labels(label, outcome).inc()
    services.metrics.duration.labels(label).observe(out.duration_ms / 1000)
    bus.publish("tool_result", tool=body.tool, success=out.ok, output=result.output,
                **out.model_dump(exclude={"output", "metadata"}))
    return out


def _count_failure(services: Services, label: str, exc: NaviError) -> None:
    if isinstance(exc, PolicyDenied):
        services.metrics.denials.labels(label, exc.rule).inc()
        services.metrics.executions.labels(label, "denied").inc()
    else:
        services.metrics.executions.labels(label, exc.code).inc()


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


async def _stream(services: Services, subject: Subject, body: ExecBody, exec_id: str
                  ) -> AsyncIterator[bytes]:
    """This execution's events from the session bus, then (on failure) an `error` event."""
    events = services.hub.bus(subject.session).subscribe()
    pending = asyncio.ensure_future(anext(events))
    await asyncio.sleep(0)  # subscribed before the run publishes anything
    task = asyncio.create_task(_run(services, subject, body, exec_id))
    try:
        while True:
            await asyncio.wait({pending, task}, return_when=asyncio.FIRST_COMPLETED)
            if pending.done():
                event = pending.result()
                if event.exec_id == exec_id:
                    yield _frame(event.wire, event.id)
                    if event.type == "tool_result":
                        break
                pending = asyncio.ensure_future(anext(events))
            elif task.exception() is not None:
                break  # failed before publishing its result
            else:
                await asyncio.wait({pending})  # result published; read it next
        with contextlib.suppress(BaseException):
            await task
        exc = task.exception() if task.done() and not task.cancelled() else None
        if exc is not None:
            yield _frame(json.dumps(_error_event(exc, exec_id), separators=(",", ":")), None)
    finally:
        pending.cancel()
        with contextlib.suppress(Exception):
            await events.aclose()
        if not task.done():
            await services.executor.kill(exec_id, "client disconnected")
            with contextlib.suppress(BaseException):
                await task


def _error_event(exc: BaseException, exec_id: str) -> dict[str, Any]:
    if not isinstance(exc, NaviError):
        return {"type": "error", "exec_id": exec_id, "code": "internal_error", "status": 500,
                "message": "internal error"}
    details = {k: v for k, v in exc.details.items() if isinstance(v, str | int | float)}
    return {"type": "error", "exec_id": exec_id, "code": exc.code, "status": status_for(exc),
            "message": exc.message, **details}


def _frame(data: str, event_id: int | None) -> bytes:
    return format_sse_event(data_str=data, id=None if event_id is None else str(event_id))
