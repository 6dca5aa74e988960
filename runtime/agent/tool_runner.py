"""The model's tool calls, one at a time, through the one tool-call service.

Every call the model makes goes the way `POST /v1/sessions/{id}/exec` does
(`runtime.calls.SessionToolCall`: registry, policy, audit, Executor, events, metrics). What
the model asked for is untrusted: an unknown tool, arguments that are not a JSON object or
fail the tool's schema, a policy denial, a quota — each becomes a tool error the model reads
and can act on; none ends the turn. Only a stall (the same call with the same arguments
`stall_repeats` times in a turn) does, by raising `Stalled`. Unlike the exec route, the
agent announces (`tool_call`) every call its model made, refused ones too, so a watcher
sees what the model tried.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from runtime.agent.caps import MODEL_TOOL_OUTPUT, clip
from runtime.agent.events import TurnEvents
from runtime.agent.llm.types import ImageInput, ToolCallRequest
from runtime.calls import (
    EVENT_ERROR,
    CallOrigin,
    CallRequest,
    SessionToolCall,
    describe_failure,
    expected,
    image_blocks,
)
from runtime.errors import NaviError, PolicyDenied
from runtime.events import link_refs
from runtime.logging import get_logger
from runtime.policy.decision import Subject
from runtime.tools import ToolResult
from runtime.tools.event_args import event_args

log = get_logger(__name__)


class Stalled(Exception):
    """The model repeated one call with the same arguments too often; the turn ends."""

    def __init__(self, tool: str, times: int) -> None:
        super().__init__(tool)
        self.tool = tool
        self.times = times


@dataclass
class CallOutcome:
    call: ToolCallRequest
    exec_id: str
    success: bool
    content: str  # what the model reads
    meta: dict[str, Any] = field(default_factory=dict)  # what the stored tool row keeps
    images: list[ImageInput] = field(default_factory=list)


def call_key(name: str, args: Any) -> str:
    return name + "\x00" + json.dumps(args, sort_keys=True, default=str)


BeforeCall = Callable[[str, str | None, Any], Awaitable[None]]


class ToolRunner:
    def __init__(self, calls: SessionToolCall, subject: Subject, events: TurnEvents,
                 offered: dict[str, str], stall_repeats: int,
                 before_call: BeforeCall | None = None,
                 planning: Callable[[], Awaitable[bool]] | None = None) -> None:
        self.calls = calls
        self.subject = subject
        self.events = events
        self.offered = offered  # name -> group, after profile and policy
        self.stall_repeats = stall_repeats
        self.before_call = before_call  # (tool, group, args): the turn's checkpoint
        self._seen: dict[str, int] = {}
        self.planning = planning  # is the session in plan mode now (its calls say so)
        self.running_exec: str | None = None

    async def run(self, call: ToolCallRequest) -> CallOutcome:
        if call.arguments is not None:
            key = call_key(call.name, call.arguments)
            self._seen[key] = self._seen.get(key, 0) + 1
            if self._seen[key] >= self.stall_repeats:
                raise Stalled(call.name, self._seen[key])
        subject = self.subject
        if self.planning is not None and await self.planning():
            subject = subject.model_copy(update={"plan_mode": True})
        request = CallRequest(
            tool=call.name, args=call.arguments, announced=True,
            origin=CallOrigin(turn_id=self.events.turn_id, call_id=call.id,
                              iteration=self.events.iteration))
        shown_args = (await asyncio.to_thread(event_args, call.arguments)
                      if call.arguments is not None
                      else {"_raw": clip(call.raw_arguments, 2048)})
        self.events.flush()
        self.calls.announce(subject, request, shown_args)
        problem = self._refusal(call)
        if problem is not None:
            self.calls.refused(subject, request, problem, "invalid_tool_call")
            return _failed(call, request.exec_id, problem, code="invalid_tool_call")
        if self.before_call is not None:
            await self.before_call(call.name, self.offered.get(call.name), call.arguments)
        self.running_exec = request.exec_id
        try:
            result = await self.calls(subject, request)
        except NaviError as exc:
            if not expected(exc):
                log.warning("agent_tool_failed", tool=call.name, code=exc.code,
                            message=exc.message)
            rule = {"rule": exc.rule} if isinstance(exc, PolicyDenied) else {}
            return _failed(call, request.exec_id, describe_failure(exc), code=exc.code, **rule)
        finally:
            self.running_exec = None
        return _succeeded(call, request.exec_id, result)

    def _refusal(self, call: ToolCallRequest) -> str | None:
        if call.error is not None:
            return (f"invalid arguments for {call.name!r}: {call.error}. Send the arguments "
                    "as one JSON object matching the tool's parameters.")
        if call.name not in self.offered:
            names = ", ".join(sorted(self.offered)) or "(none)"
            return f"unknown tool {call.name[:100]!r}. Tools you can call: {names}"
        return None


def _failed(call: ToolCallRequest, exec_id: str, error: str, **meta: str) -> CallOutcome:
    return CallOutcome(call=call, exec_id=exec_id, success=False,
                       content=f"Error: {clip(error, EVENT_ERROR)}",
                       meta={"exec_id": exec_id, "success": False, **meta})


def _succeeded(call: ToolCallRequest, exec_id: str, result: ToolResult) -> CallOutcome:
    blocks = image_blocks(result)
    shown = [{"path": b.path, "media_type": b.media_type} for b in blocks]
    run = result.execution
    fields = (run.model_dump(include={"exit_code", "timed_out", "oom_killed", "truncated",
                                      "duration_ms", "audit_seq", "timeout_s", "runtime"})
              if run is not None else {})
    text = clip(result.output, MODEL_TOOL_OUTPUT) or "(no output)"
    if not result.success:
        text = f"Error: {clip(result.error or 'failed', EVENT_ERROR)}\n{text}"
    return CallOutcome(call=call, exec_id=exec_id, success=result.success, content=text,
                       meta={"exec_id": exec_id, "success": result.success, "images": shown,
                             **fields, **{k: v.model_dump() for k, v
                                          in link_refs(result.metadata).items()}},
                       images=[ImageInput(media_type=b.media_type, data_b64=b.data_b64)
                               for b in blocks])
