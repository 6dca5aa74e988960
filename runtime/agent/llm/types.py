"""The one small interface between the agent loop and any model server.

A backend turns a `ChatRequest` (neutral messages + tool schemas) into a stream of chunks:
`ThinkingDelta`, `TextDelta`, `ToolCallChunk` (one per complete call), then exactly one
`Done` with the usage (and, from the runtime itself, `Notice`s about how it is served).
Everything a backend yields came from a model: it is untrusted text, so backends bound what
they accumulate and never interpret it beyond JSON parsing of tool arguments (a call whose
arguments do not parse arrives with `error` set, not as a crash).

Failures: `LLMUnavailable` when no server answered (connection refused, timeouts, 5xx on
every host), `LLMError` when a server answered with something unusable.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

Role = Literal["system", "user", "assistant", "tool"]

MAX_TOOL_ARGS_CHARS = 256 * 1024
"""Arguments larger than this (as JSON text) are refused as malformed."""


class ToolCallRequest(BaseModel):
    """A call the model asked for. `arguments` is None when they did not parse (`error`)."""

    id: str
    name: str
    arguments: dict[str, Any] | None = None
    raw_arguments: str = ""
    error: str | None = None

    @classmethod
    def parsed(cls, id: str, name: str, arguments: Any, raw: str = "") -> ToolCallRequest:
        """A call with the model's ``arguments`` (object or JSON text) parsed here, its name
        and raw text bounded; ``error`` set when they do not parse."""
        args, error = parse_arguments(arguments)
        return cls(id=id, name=name[:200], arguments=args, raw_arguments=raw[:4096], error=error)


class ImageInput(BaseModel):
    media_type: str
    data_b64: str


class ChatMessage(BaseModel):
    role: Role
    content: str = ""
    tool_calls: list[ToolCallRequest] = Field(default_factory=list)
    tool_call_id: str | None = None
    tool_name: str | None = None
    images: list[ImageInput] = Field(default_factory=list)


class ChatRequest(BaseModel):
    model: str
    messages: list[ChatMessage]
    tools: list[dict[str, Any]] = Field(
        default_factory=list, description="[{name, description, parameters}]")
    temperature: float | None = None
    think: bool | None = None
    num_ctx: int | None = None
    max_tokens: int | None = Field(None, description="cap on the answer's length in tokens")


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(prompt_tokens=self.prompt_tokens + other.prompt_tokens,
                     completion_tokens=self.completion_tokens + other.completion_tokens)


@dataclass(frozen=True)
class ThinkingDelta:
    text: str


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ToolCallChunk:
    call: ToolCallRequest


@dataclass(frozen=True)
class Done:
    usage: Usage = field(default_factory=Usage)
    reason: str | None = None
    served_by: str | None = None


@dataclass(frozen=True)
class Notice:
    """Something the user should know about how the answer is served (not model output);
    while the embedded model is prepared, its ``phase`` and ``progress`` (0..1)."""

    text: str
    phase: str | None = None
    progress: float | None = None


Chunk = ThinkingDelta | TextDelta | ToolCallChunk | Done | Notice


class LLMBackend(Protocol):
    """What the loop needs from a model server."""

    @property
    def name(self) -> str: ...

    def stream(self, request: ChatRequest) -> AsyncGenerator[Chunk, None]:
        """Stream one answer; ends with one `Done`."""
        ...

    async def context_window(self, model: str) -> int | None:
        """The model's context length as the server reports it (None: unknown)."""
        ...

    async def close(self) -> None: ...


def parse_arguments(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """Tool-call arguments from a model: a JSON object (or its text). Returns (args, error)."""
    if isinstance(raw, dict):
        return raw, None
    if raw is None or raw == "":
        return {}, None
    if not isinstance(raw, str):
        return None, "arguments must be a JSON object"
    if len(raw) > MAX_TOOL_ARGS_CHARS:
        return None, f"arguments are larger than {MAX_TOOL_ARGS_CHARS} characters"
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        return None, f"arguments are not valid JSON ({str(exc)[:120]})"
    if not isinstance(value, dict):
        return None, "arguments must be a JSON object"
    return value, None
