"""What a session's event stream carries: one pydantic model per `type`.

Publishers build one of these and hand it to `SessionEventBus.publish`; the bus adds `id`
(monotonic per session) and `ts`, encodes it once and sends that text to every watcher (SSE
`data`, WebSocket message). Field names are the wire names README "Events" and the loop's
docstring (`runtime.agent.loop`) document; a field in `OMIT_WHEN_NONE` is left out of the
wire object when it has no value (an event outside a turn carries no `turn_id`).

`Event` is what the bus keeps and sends: a model encoded once, with its `id` and `ts`.

`ToolResultEvent` carries an execution's fields (`runtime.calls.Execution`, the exec route's
fields but `exec_id`) flat beside the tool's own, exactly when one ran.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

StopReason = Literal["stop", "max_iterations", "stalled", "cancelled", "too_long"]
Runtime = Literal["runc", "gvisor"]


class SessionEvent(BaseModel):
    """Base of every event: frozen, unknown fields refused (a typo is a bug, not a field)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: str
    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset()

    def payload(self) -> dict[str, Any]:
        """The wire object without the bus's `id` and `ts`."""
        data = self.model_dump(mode="json")
        for key in self.OMIT_WHEN_NONE:
            if data.get(key) is None:
                data.pop(key, None)
        return data


class TurnEvent(SessionEvent):
    turn_id: str


class StreamStart(TurnEvent):
    type: Literal["stream_start"] = "stream_start"
    model: str
    profile: str
    backend: str
    max_iterations: int
    parent_call: str | None = Field(None, description="a sub-agent's turn: the parent's "
                                    "spawn_agent call (its events belong in that card)")
    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset({"parent_call"})


class ThinkingDelta(TurnEvent):
    type: Literal["thinking_delta"] = "thinking_delta"
    iteration: int
    content: str


class ThinkingEnd(TurnEvent):
    type: Literal["thinking_end"] = "thinking_end"
    iteration: int


class StreamDelta(TurnEvent):
    type: Literal["stream_delta"] = "stream_delta"
    iteration: int
    content: str


class Usage(BaseModel):
    model_config = ConfigDict(frozen=True)

    prompt_tokens: int = 0
    completion_tokens: int = 0


class StreamEnd(TurnEvent):
    type: Literal["stream_end"] = "stream_end"
    content: str
    stop_reason: StopReason
    usage: Usage
    iterations: int


class Notice(SessionEvent):
    """The runtime has something to say about how the answer is served."""

    type: Literal["notice"] = "notice"
    turn_id: str | None = None
    message: str
    phase: str | None = None
    progress: float | None = None
    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset({"turn_id", "phase", "progress"})


class ErrorEvent(SessionEvent):
    """A turn that failed (`turn_id`), or a streamed exec that did (`exec_id`, `status`).

    Extra fields are a `NaviError`'s scalar details (e.g. `rule`, `retry_after`), flat."""

    model_config = ConfigDict(frozen=True, extra="allow")

    type: Literal["error"] = "error"
    code: str
    message: str
    turn_id: str | None = None
    iterations: int | None = None
    exec_id: str | None = None
    status: int | None = None
    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset(
        {"turn_id", "iterations", "exec_id", "status"})


_CALL_CONTEXT = frozenset({"turn_id", "call_id", "iteration"})


class ToolCallEvent(SessionEvent):
    """A call whose tool exists and whose arguments are valid (agent: also refused calls)."""

    type: Literal["tool_call"] = "tool_call"
    tool: str
    args: JsonValue = Field(description="at most 64 KiB, else `runtime.tools.event_args`'s "
                            "digest")
    exec_id: str
    turn_id: str | None = None
    call_id: str | None = None
    iteration: int | None = None
    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = _CALL_CONTEXT


class ImageRef(BaseModel):
    """An image a tool returned, as events and stored rows keep it: its path only."""

    model_config = ConfigDict(frozen=True)

    path: str
    media_type: str


class LinkRef(BaseModel):
    """A link a tool made to a session file (`share_file`'s `shared`, `content_publish`'s
    `published`): what a client shows for it (the web client draws a published file)."""

    model_config = ConfigDict(frozen=True)

    id: str
    path: str
    url: str
    kind: str | None = None
    expires_at: float | None = None


LINK_FIELDS = ("shared", "published")


def link_refs(metadata: dict[str, Any]) -> dict[str, LinkRef]:
    """The links in a tool result's metadata, typed (keys of `LINK_FIELDS`)."""
    return {k: LinkRef.model_validate(metadata[k]) for k in LINK_FIELDS
            if isinstance(metadata.get(k), dict)}


EXEC_EVENT_FIELDS = ("ok", "exit_code", "stdout", "stderr", "timed_out", "oom_killed",
                     "truncated", "duration_ms", "audit_seq", "timeout_s", "runtime", "node")


class ToolResultEvent(SessionEvent):
    """How a call ended. The execution's fields are present exactly when one ran."""

    type: Literal["tool_result"] = "tool_result"
    tool: str
    success: bool
    output: str = ""
    error: str | None = None
    exec_id: str
    turn_id: str | None = None
    call_id: str | None = None
    iteration: int | None = None
    code: str | None = Field(None, description="the error's code, when the call was refused")
    rule: str | None = Field(None, description="the policy rule that decided")
    images: list[ImageRef] | None = None
    shared: LinkRef | None = None
    published: LinkRef | None = None
    ok: bool | None = None
    exit_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None
    timed_out: bool | None = None
    oom_killed: bool | None = None
    truncated: bool | None = None
    duration_ms: int | None = None
    audit_seq: int | None = None
    timeout_s: float | None = None
    runtime: Runtime | None = None
    node: str | None = None
    kernel: dict[str, Any] | None = Field(
        None, description="a kernel execute's results (kernel_exec): {kernel, results, error, "
        "execution_count, restored, lost}")
    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = _CALL_CONTEXT | {"code", "rule", "images",
                                                                 "kernel", *LINK_FIELDS}

    def payload(self) -> dict[str, Any]:
        data = super().payload()
        if self.ok is None:  # no execution: none of its fields
            for key in EXEC_EVENT_FIELDS:
                data.pop(key, None)
        return data


class ExecOutput(SessionEvent):
    type: Literal["exec_output"] = "exec_output"
    exec_id: str
    stream: Literal["stdout", "stderr"]
    data: str


class ApprovalRequired(SessionEvent):
    type: Literal["approval_required"] = "approval_required"
    approval_id: str  # (the approval's own `id`: on the wire `id` is the bus's)
    session: str
    tool: str
    args: JsonValue
    rule: str
    reason: str
    status: str
    created_at: float
    expires_at: float | None = None
    decided_by: str | None = None
    tool_hash: str | None = None
    requested_by: str | None = None
    approvers: list[str] = Field(default_factory=list)
    self_approve: bool = False


class ApprovalDecided(SessionEvent):
    type: Literal["approval_decided"] = "approval_decided"
    approval_id: str
    status: str
    decided_by: str | None = None


class ProfileChanged(SessionEvent):
    """The session's profile changed (`switch_profile`); the agent uses it from its next
    step."""

    type: Literal["profile_changed"] = "profile_changed"
    profile: str
    previous: str


class ProcessStarted(SessionEvent):
    """A background process of the session started (`process` is its public record)."""

    type: Literal["process_started"] = "process_started"
    process: dict[str, JsonValue]


class ProcessOutputEvent(SessionEvent):
    """Live output of a background process, coalesced: `data` is the text of the log's
    bytes from `offset` to `next` (what was not sent live can be read from the log)."""

    type: Literal["process_output"] = "process_output"
    process_id: str
    data: str
    offset: int
    next: int


class ProcessExited(SessionEvent):
    type: Literal["process_exited"] = "process_exited"
    process_id: str
    exit_code: int | None = None
    reason: str


class SubAgentEvent(SessionEvent):
    """An event of a sub-agent's turn (`spawn_agent`), carried inside its parent's call:
    `event` is the inner event's object (its own `type`), `parent_call` the spawn_agent call
    whose card it belongs in, `turn_id` the sub-agent's turn. Clients that do not nest can
    ignore these: the parent's own `tool_result` carries the sub-agent's answer."""

    type: Literal["subagent"] = "subagent"
    parent_call: str
    turn_id: str
    event: dict[str, JsonValue]


class QuestionAsked(SessionEvent):
    """The agent asks its user (`ask_user`); answer with `POST .../questions/{question_id}`."""

    type: Literal["question"] = "question"
    question_id: str
    question: str
    options: list[str] | None = None
    turn_id: str | None = None
    expires_at: float | None = None
    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset({"turn_id"})


class QuestionAnswered(SessionEvent):
    """A question ended: `answered`, `expired` or `cancelled` (its turn ended first)."""

    type: Literal["question_answered"] = "question_answered"
    question_id: str
    status: str
    turn_id: str | None = None
    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset({"turn_id"})


class Resync(SessionEvent):
    """Sent to a resuming reader first when events it asked for were already dropped."""

    type: Literal["resync"] = "resync"
    missed: int


AnyEvent = (StreamStart | ThinkingDelta | ThinkingEnd | StreamDelta | StreamEnd | Notice
            | ErrorEvent | ToolCallEvent | ToolResultEvent | ExecOutput | ApprovalRequired
            | ApprovalDecided | ProfileChanged | SubAgentEvent | QuestionAsked
            | QuestionAnswered | Resync | ProcessStarted | ProcessOutputEvent | ProcessExited)


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    type: str
    ts: float
    wire: str  # the JSON object subscribers receive (ASCII), encoded at publish
    exec_id: str | None = None

    @classmethod
    def make(cls, id: int, body: SessionEvent, ts: float | None = None) -> Event:
        """`id` and `ts` are the bus's (no event model has such fields)."""
        ts = time.time() if ts is None else ts
        data = body.payload()
        wire = json.dumps({**data, "id": id, "ts": ts}, separators=(",", ":"), default=str)
        exec_id = data.get("exec_id")
        return cls(id, body.type, ts, wire, exec_id if isinstance(exec_id, str) else None)

    def as_json(self) -> dict[str, Any]:
        """The wire object."""
        value: dict[str, Any] = json.loads(self.wire)
        return value

    @property
    def data(self) -> dict[str, Any]:
        """The payload, without the bus's `id`, `type` and `ts` (decoded on each access)."""
        value = self.as_json()
        for key in ("id", "type", "ts"):
            value.pop(key, None)
        return value
