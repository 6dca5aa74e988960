"""Session events: typed models, the per-session bus with byte-bounded replay, the hub.

Below both `runtime.api` (which streams them over SSE and WebSocket) and `runtime.agent`
(which publishes a turn's), so arrows point down from either.
"""

from runtime.events.bus import NESTED_TURN, EventHub, SessionEventBus
from runtime.events.models import (
    AnyEvent,
    ApprovalDecided,
    ApprovalRequired,
    ErrorEvent,
    Event,
    ExecOutput,
    ImageRef,
    LinkRef,
    Notice,
    ProcessExited,
    ProcessOutputEvent,
    ProcessStarted,
    ProfileChanged,
    QuestionAnswered,
    QuestionAsked,
    Resync,
    SessionEvent,
    StopReason,
    StreamDelta,
    StreamEnd,
    StreamStart,
    SubAgentEvent,
    ThinkingDelta,
    ThinkingEnd,
    ToolCallEvent,
    ToolResultEvent,
    Usage,
    link_refs,
)
from runtime.events.replay import ReplayLimits

__all__ = [
    "NESTED_TURN", "AnyEvent", "ApprovalDecided", "ApprovalRequired", "ErrorEvent", "Event",
    "EventHub", "ExecOutput", "ImageRef", "LinkRef", "Notice", "ProcessExited",
    "ProcessOutputEvent", "ProcessStarted", "ProfileChanged", "QuestionAnswered",
    "QuestionAsked", "ReplayLimits",
    "Resync", "SessionEvent", "SessionEventBus", "StopReason", "StreamDelta", "StreamEnd",
    "StreamStart", "SubAgentEvent", "ThinkingDelta", "ThinkingEnd", "ToolCallEvent",
    "ToolResultEvent", "Usage", "link_refs",
]
