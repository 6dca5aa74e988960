"""Streaming POSTs to OpenAI-style servers: JSON events from ``data:`` lines, errors mapped.

Shared by the OpenAI-compatible backend (``/chat/completions``) and the embedded one
(``/completions``): both speak the same Server-Sent Events framing, end with ``[DONE]``, and
report failures the same way. ``who`` names the server in every error message.
``EventStreamBackend`` is what the two backends share around that (client, close, stream);
``Choices`` walks the events' ``choices`` and keeps the usage and finish reason seen.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import httpx

from runtime.agent.llm.types import ChatRequest, Chunk, Usage
from runtime.errors import LLMError, LLMUnavailable

MAX_LINE_CHARS = 1024 * 1024
MAX_ERROR_BODY = 2000
CONNECT_TIMEOUT_S = 5.0


class EventStreamBackend:
    """An ``LLMBackend`` over one server's streaming POST: a subclass says where (``path``),
    what it sends (``body``) and how events become chunks (``parse``)."""

    name: str
    who: str  # the server, in error messages
    path: str

    def __init__(self, base_url: str, *, timeout_s: float,
                 headers: dict[str, str] | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.base_url, follow_redirects=False,
            headers={"Accept": "text/event-stream", **(headers or {})},
            timeout=httpx.Timeout(timeout_s, connect=min(CONNECT_TIMEOUT_S, timeout_s)))

    async def close(self) -> None:
        await self._http.aclose()

    def body(self, request: ChatRequest) -> dict[str, Any]:
        raise NotImplementedError

    def parse(self, events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[Chunk]:
        raise NotImplementedError

    async def stream(self, request: ChatRequest) -> AsyncGenerator[Chunk, None]:
        events = post_events(self._http, self.path, self.body(request), who=self.who,
                             base_url=self.base_url)
        async for chunk in self.parse(events):
            yield chunk


class Choices:
    """The ``choices`` objects of a stream's events, in order; ``usage`` and ``reason`` are
    the last usage and finish reason seen (read them once the iteration ended)."""

    def __init__(self, events: AsyncIterator[dict[str, Any]]) -> None:
        self.usage = Usage()
        self.reason: str | None = None
        self._events = events

    async def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        async for event in self._events:
            if isinstance(event.get("usage"), dict):
                self.usage = usage_of(event["usage"])
            for choice in event.get("choices") or ():
                if not isinstance(choice, dict):
                    continue
                if isinstance(choice.get("finish_reason"), str):
                    self.reason = choice["finish_reason"]
                yield choice


async def post_events(
    http: httpx.AsyncClient, path: str, body: dict[str, Any], *, who: str, base_url: str
) -> AsyncIterator[dict[str, Any]]:
    """POST ``body`` and yield each event object until ``[DONE]`` or the end of the stream."""
    try:
        async with http.stream("POST", path, json=body) as resp:
            if resp.status_code >= 400:
                await _fail(resp, who)
            async for line in resp.aiter_lines():
                if len(line) > MAX_LINE_CHARS:
                    raise LLMError(f"{who} sent an oversized event")
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    return
                try:
                    event = json.loads(data)
                except ValueError:
                    raise LLMError(f"{who} sent an event that is not JSON") from None
                if not isinstance(event, dict):
                    continue
                if isinstance(event.get("error"), dict | str):
                    raise LLMError(f"{who}: {str(event['error'])[:500]}")
                yield event
    except httpx.TransportError as exc:
        raise LLMUnavailable(f"{who} at {base_url}: "
                             f"{str(exc)[:300] or type(exc).__name__}") from None


async def _fail(resp: httpx.Response, who: str) -> None:
    body = b""
    async for piece in resp.aiter_bytes():
        body += piece
        if len(body) > MAX_ERROR_BODY:
            break
    text = body[:MAX_ERROR_BODY].decode("utf-8", "replace")
    try:
        parsed = json.loads(text)
        err = parsed.get("error") if isinstance(parsed, dict) else None
        text = str(err.get("message", err) if isinstance(err, dict) else err or text)
    except ValueError:
        pass
    cls = LLMUnavailable if resp.status_code >= 500 else LLMError
    raise cls(f"{who} answered HTTP {resp.status_code}: {text[:500]}", status=resp.status_code)


def usage_of(raw: dict[str, Any]) -> Usage:
    """Token counts of an event's ``usage`` (anything not a non-negative int counts 0)."""

    def number(key: str) -> int:
        value = raw.get(key)
        return value if isinstance(value, int) and value >= 0 else 0

    return Usage(prompt_tokens=number("prompt_tokens"),
                 completion_tokens=number("completion_tokens"))
