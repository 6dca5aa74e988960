"""Size caps for everything that came from a model or a tool before it is stored or streamed.

Model output is untrusted and unbounded: text is cut head + tail with a marker saying how
much was left out, and JSON-like values (tool arguments) are shortened string by string,
so an event or a row never grows past a known size. (`clip` and the event caps are
`runtime.calls.caps`'s, shared with the tool-call service.)
"""

from __future__ import annotations

import json
from typing import Any

from runtime.calls.caps import EVENT_TEXT, clip

__all__ = ["ANSWER_TEXT", "EVENT_TEXT", "MODEL_TOOL_OUTPUT", "STORED_TEXT", "STORED_THINKING",
           "clip", "clip_value", "json_text"]

STORED_TEXT = 64 * 1024       # a message's content in the database
STORED_THINKING = 32 * 1024
MODEL_TOOL_OUTPUT = 16 * 1024  # tool output handed back to the model
ANSWER_TEXT = 256 * 1024      # one model answer (text), streamed and kept
ARG_STRING = 8 * 1024         # one string inside tool arguments, in events and rows
MAX_DEPTH = 8


def clip_value(value: Any, limit: int = ARG_STRING, depth: int = 0) -> Any:
    """A JSON value with every long string clipped, at most 100 items per container."""
    if depth > MAX_DEPTH:
        return "[... nested too deep ...]"
    if isinstance(value, str):
        return clip(value, limit)
    if isinstance(value, dict):
        items = list(value.items())[:100]
        return {clip(str(k), 200): clip_value(v, limit, depth + 1) for k, v in items}
    if isinstance(value, list | tuple):
        return [clip_value(v, limit, depth + 1) for v in list(value)[:100]]
    if value is None or isinstance(value, bool | int | float):
        return value
    return clip(str(value), limit)


def json_text(value: Any, limit: int) -> str:
    return clip(json.dumps(value, ensure_ascii=False, default=str), limit)
