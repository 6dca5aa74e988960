"""The model's tool calls, one at a time, through the registry and so through the Executor.

Every call the model makes goes the same way as `POST /v1/sessions/{id}/exec`: the tool
registry validates the arguments, the Executor (or, for tools that run no code, the
registry) asks the policy, audits, and runs it in a fresh container. What the model asked
for is untrusted: an unknown tool, arguments that are not a JSON object or fail the tool's
schema, a policy denial, a quota — each becomes a tool error the model reads and can act
on; none ends the turn. Only a stall (the same call with the same arguments
`stall_repeats` times in a turn) does, by raising `Stalled`.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from runtime.agent.caps import EVENT_TEXT, MODEL_TOOL_OUTPUT, clip
from runtime.agent.events import TurnEvents
from runtime.agent.live_output import LiveOutput
from runtime.agent.llm.types import ImageInput, ToolCallRequest
from runtime.errors import InvalidInput, NaviError, NotFound, PolicyDenied, QuotaExceeded
from runtime.executor import new_exec_id
from runtime.logging import get_logger
from runtime.policy.decision import Subject
from runtime.tools import ToolContext, ToolResult
from runtime.tools.event_args import event_args

log = get_logger(__name__)

EXEC_FIELDS = ("exit_code", "timed_out", "oom_killed", "truncated", "duration_ms", "audit_seq",
               "timeout_s", "rule", "runtime")
MAX_IMAGES = 4


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
    meta: dict[str, Any] = field(default_factory=dict)
    images: list[ImageInput] = field(default_factory=list)


def call_key(name: str, args: Any) -> str:
    return name + "\x00" + json.dumps(args, sort_keys=True, default=str)


class ToolRunner:
    def __init__(self, services: Any, subject: Subject, events: TurnEvents,
                 offered: dict[str, str], stall_repeats: int) -> None:
        self.services = services
        self.subject = subject
        self.events = events
        self.offered = offered  # name -> group, after profile and policy
        self.stall_repeats = stall_repeats
        self._seen: dict[str, int] = {}
        self.running_exec: str | None = None

    async def run(self, call: ToolCallRequest) -> CallOutcome:
        exec_id = new_exec_id()
        if call.arguments is not None:
            key = call_key(call.name, call.arguments)
            self._seen[key] = self._seen.get(key, 0) + 1
            if self._seen[key] >= self.stall_repeats:
                raise Stalled(call.name, self._seen[key])
        shown_args = (await asyncio.to_thread(event_args, call.arguments)
                      if call.arguments is not None
                      else {"_raw": clip(call.raw_arguments, 2048)})
        self.events.emit("tool_call", tool=call.name[:200], args=shown_args, exec_id=exec_id,
                         call_id=call.id, iteration=self.events.iteration)
        problem = self._refusal(call)
        if problem is not None:
            return self._failed(call, exec_id, problem, code="invalid_tool_call")
        try:
            result = await self._invoke(call, exec_id)
        except PolicyDenied as exc:
            self.services.metrics.denials.labels(self._label(call), exc.rule).inc()
            return self._failed(call, exec_id, f"denied by policy (rule {exc.rule}): "
                                f"{exc.message}", code=exc.code, rule=exc.rule)
        except QuotaExceeded as exc:
            return self._failed(call, exec_id, f"{exc.message}; retry after "
                                f"{exc.retry_after} s", code=exc.code)
        except (InvalidInput, NotFound) as exc:
            return self._failed(call, exec_id, exc.message, code=exc.code)
        except NaviError as exc:
            log.warning("agent_tool_failed", tool=call.name, code=exc.code, message=exc.message)
            return self._failed(call, exec_id, f"{exc.code}: {exc.message}", code=exc.code)
        return self._succeeded(call, exec_id, result)

    def _label(self, call: ToolCallRequest) -> str:
        """The call's metric label, from a closed set (the model names tools at will)."""
        label: str = self.services.metrics.tool_label(
            call.name, self.services.tools.registry.builtin_names(),
            found=call.name in self.offered)
        return label

    def _refusal(self, call: ToolCallRequest) -> str | None:
        if call.error is not None:
            return (f"invalid arguments for {call.name!r}: {call.error}. Send the arguments "
                    "as one JSON object matching the tool's parameters.")
        if call.name not in self.offered:
            names = ", ".join(sorted(self.offered)) or "(none)"
            return f"unknown tool {call.name[:100]!r}. Tools you can call: {names}"
        return None

    async def _invoke(self, call: ToolCallRequest, exec_id: str) -> ToolResult:
        services = self.services
        bus = self.events.bus
        workspace_path = await asyncio.to_thread(services.workspaces.verify, self.subject.tenant,
                                                 self.subject.session)
        workspace = await asyncio.to_thread(services.workspaces.open, self.subject.tenant,
                                            self.subject.session)
        ctx = ToolContext(subject=self.subject, workspace=workspace,
                          workspace_path=workspace_path, executor=services.executor,
                          on_output=LiveOutput(bus, exec_id), exec_id=exec_id,
                          approver=services.approver_for(bus))
        services.metrics.active.inc()
        self.running_exec = exec_id
        try:
            result: ToolResult = await services.tools.registry.invoke(
                call.name, call.arguments, ctx)
            return result
        finally:
            self.running_exec = None
            services.metrics.active.dec()
            workspace.close()

    def _failed(self, call: ToolCallRequest, exec_id: str, error: str, **meta: Any
                ) -> CallOutcome:
        outcome = "denied" if meta.get("code") == "policy_denied" else "refused"
        self.services.metrics.executions.labels(self._label(call), outcome).inc()
        self.events.emit("tool_result", tool=call.name[:200], success=False, output="",
                         error=clip(error, 4096), exec_id=exec_id, call_id=call.id, **meta)
        return CallOutcome(call=call, exec_id=exec_id, success=False,
                           content=f"Error: {clip(error, 4096)}",
                           meta={"exec_id": exec_id, "success": False, **meta})

    def _succeeded(self, call: ToolCallRequest, exec_id: str, result: ToolResult
                   ) -> CallOutcome:
        meta = result.metadata
        fields = {k: meta[k] for k in EXEC_FIELDS if k in meta}
        images, shown = _images(meta.get("images"))
        outcome = "ok" if result.success else "failed"
        if fields.get("timed_out"):
            outcome = "timeout"
        elif fields.get("oom_killed"):
            outcome = "oom"
        label = self._label(call)
        self.services.metrics.executions.labels(label, outcome).inc()
        if "duration_ms" in fields:
            self.services.metrics.duration.labels(label).observe(fields["duration_ms"] / 1000)
        self.events.emit("tool_result", tool=call.name, success=result.success,
                         output=clip(result.output, EVENT_TEXT),
                         error=clip(result.error, 4096) if result.error else None,
                         exec_id=exec_id, call_id=call.id, images=shown, **fields)
        text = clip(result.output, MODEL_TOOL_OUTPUT) or "(no output)"
        if not result.success:
            text = f"Error: {clip(result.error or 'failed', 4096)}\n{text}"
        return CallOutcome(call=call, exec_id=exec_id, success=result.success, content=text,
                           meta={"exec_id": exec_id, "success": result.success,
                                 "images": shown, **fields}, images=images)


def _images(raw: Any) -> tuple[list[ImageInput], list[dict[str, str]]]:
    """Image blocks for the model, and what the event and the stored row keep: paths only."""
    images: list[ImageInput] = []
    shown: list[dict[str, str]] = []
    for block in raw if isinstance(raw, list) else []:
        if len(images) >= MAX_IMAGES or not isinstance(block, dict):
            continue
        data, media = block.get("data_b64"), block.get("media_type")
        if isinstance(data, str) and isinstance(media, str):
            images.append(ImageInput(media_type=media, data_b64=data))
            shown.append({"path": str(block.get("path", ""))[:1024], "media_type": media})
    return images, shown
