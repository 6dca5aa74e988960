"""Tool calls in a session, one typed service for every caller (exec route, agent, MCP).

Below `runtime.api` and `runtime.agent`, above the tool registry, the Executor and the event
bus. See `runtime.calls.service`.
"""

from runtime.calls.caps import EVENT_ERROR, EVENT_TEXT, clip
from runtime.calls.images import MAX_IMAGES, image_blocks, image_refs
from runtime.calls.live_output import LiveOutput
from runtime.calls.service import (
    CallRequest,
    SessionToolCall,
    describe_failure,
    expected,
)
from runtime.sandbox.models import Execution
from runtime.tools.base import CallOrigin

__all__ = [
    "EVENT_ERROR", "EVENT_TEXT", "MAX_IMAGES", "CallOrigin", "CallRequest", "Execution",
    "LiveOutput", "SessionToolCall", "clip", "describe_failure", "expected", "image_blocks",
    "image_refs",
]
