"""Streaming POSTs to OpenAI-style servers: JSON events from ``data:`` lines, errors mapped.

Shared by the OpenAI-compatible backend (``/chat/completions``) and the embedded one
(``/completions``): both speak the same Server-Sent Events framing, end with ``[DONE]``, and
report failures the same way. ``who`` names the server in every error message.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from runtime.agent.llm.types import Usage
from runtime.errors import LLMError, LLMUnavailable

MAX_LINE_CHARS = 1024 * 1024
MAX_ERROR_BODY = 2000


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
