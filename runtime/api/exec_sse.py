"""One execution's events as SSE frames: the shared body of `POST .../exec?stream=true` and
`POST .../kernels/{name}/execute?stream=true`.

The session bus is subscribed before the run starts (nothing it publishes is missed); frames
are this execution's events up to its `tool_result`; a run that failed ends the stream with an
`error` event of the caller's own (not on the bus); a client that leaves before the end has
its execution killed (``kill(exec_id, reason)``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi.sse import format_sse_event

from runtime.api.errors import status_for
from runtime.errors import NaviError
from runtime.events import ErrorEvent
from runtime.events.bus import SessionEventBus
from runtime.streaming import until_failed


async def execution_frames(bus: SessionEventBus, exec_id: str,
                           run: Callable[[], Awaitable[Any]],
                           kill: Callable[[str, str], Awaitable[Any]]) -> AsyncIterator[bytes]:
    events = bus.subscribe()
    reading = asyncio.ensure_future(anext(events))
    await asyncio.sleep(0)  # subscribed before the run publishes anything
    task = asyncio.ensure_future(run())
    try:
        async with contextlib.aclosing(until_failed(events, task, reading=reading)) as ours:
            async for event in ours:  # closed at the break: its read of the bus is cancelled
                if event.exec_id == exec_id:
                    yield _frame(event.wire, event.id)
                    if event.type == "tool_result":
                        break
        with contextlib.suppress(BaseException):
            await task
        exc = task.exception() if task.done() and not task.cancelled() else None
        if exc is not None:
            yield _frame(json.dumps(error_event(exc, exec_id).payload(), separators=(",", ":")),
                         None)
    finally:
        reading.cancel()
        with contextlib.suppress(Exception):
            await events.aclose()
        if not task.done():  # the client left: the execution is interrupted
            await kill(exec_id, "client disconnected")
            with contextlib.suppress(BaseException):
                await task


def error_event(exc: BaseException, exec_id: str) -> ErrorEvent:
    """The stream's last frame when the call failed (not on the bus: the caller's own)."""
    if not isinstance(exc, NaviError):
        return ErrorEvent(exec_id=exec_id, code="internal_error", status=500,
                          message="internal error")
    details = {k: v for k, v in exc.details.items()
               if isinstance(v, str | int | float) and k not in ErrorEvent.model_fields}
    return ErrorEvent(exec_id=exec_id, code=exc.code, status=status_for(exc),
                      message=exc.message, **details)


def _frame(data: str, event_id: int | None) -> bytes:
    return format_sse_event(data_str=data, id=None if event_id is None else str(event_id))
