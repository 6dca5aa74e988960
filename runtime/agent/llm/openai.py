"""Any OpenAI-compatible server (`/chat/completions` with `stream: true`) through httpx.

`NAVI_OPENAI_BASE_URL` is the base including its version path (`http://host:8080/v1`).
Streamed tool calls arrive as fragments keyed by `index`; they are assembled here and their
`arguments` text parsed once complete (unparseable arguments become a call with `error`,
which the loop hands back to the model). Reasoning text is read from `reasoning_content`
(llama.cpp, vLLM, DeepSeek) or `reasoning` (OpenRouter, LM Studio).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from runtime.agent.llm.sse import Choices, EventStreamBackend
from runtime.agent.llm.types import (
    MAX_TOOL_ARGS_CHARS,
    ChatMessage,
    ChatRequest,
    Chunk,
    Done,
    TextDelta,
    ThinkingDelta,
    ToolCallChunk,
    ToolCallRequest,
)

MAX_TOOL_CALLS = 64


def to_openai_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        item: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.images:
            item["content"] = [{"type": "text", "text": m.content}] + [
                {"type": "image_url",
                 "image_url": {"url": f"data:{i.media_type};base64,{i.data_b64}"}}
                for i in m.images
            ]
        if m.tool_calls:
            item["tool_calls"] = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name,
                              "arguments": json.dumps(c.arguments or {}) if c.error is None
                              else c.raw_arguments}}
                for c in m.tool_calls
            ]
        if m.role == "tool":
            item["tool_call_id"] = m.tool_call_id or ""
        out.append(item)
    return out


def to_openai_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {
        "name": t["name"], "description": t.get("description", ""),
        "parameters": t.get("parameters") or {"type": "object", "properties": {}}}}
        for t in tools]


class _CallParts:
    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.arguments: list[str] = []
        self.size = 0

    def add(self, delta: dict[str, Any]) -> None:
        if isinstance(delta.get("id"), str):
            self.id = delta["id"][:200]
        fn: dict[str, Any] = delta["function"] if isinstance(delta.get("function"), dict) else {}
        if isinstance(fn.get("name"), str):
            self.name = (self.name + fn["name"])[:200]
        piece = fn.get("arguments")
        if isinstance(piece, dict):  # some servers send the object itself
            piece = json.dumps(piece)
        if isinstance(piece, str) and self.size <= MAX_TOOL_ARGS_CHARS:
            self.arguments.append(piece)
            self.size += len(piece)

    def finish(self, fallback_id: str) -> ToolCallRequest:
        raw = "".join(self.arguments)
        return ToolCallRequest.parsed(self.id or fallback_id, self.name, raw, raw)


class OpenAIBackend(EventStreamBackend):
    name = "openai"
    who = "OpenAI-compatible server"
    path = "/chat/completions"

    def __init__(self, base_url: str, api_key: str | None = None, *,
                 timeout_s: float = 300.0) -> None:
        super().__init__(base_url, timeout_s=timeout_s,
                         headers={"Authorization": f"Bearer {api_key}"} if api_key else None)
        self._windows: dict[str, int | None] = {}

    def body(self, request: ChatRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": request.model, "messages": to_openai_messages(request.messages),
            "stream": True, "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = to_openai_tools(request.tools)
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.max_tokens:
            body["max_tokens"] = request.max_tokens
        return body

    async def parse(self, events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[Chunk]:
        calls: dict[int, _CallParts] = {}
        choices = Choices(events)
        async for choice in choices:
            delta: dict[str, Any] = (choice["delta"] if isinstance(choice.get("delta"), dict)
                                     else {})
            thinking = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(thinking, str) and thinking:
                yield ThinkingDelta(thinking)
            if isinstance(delta.get("content"), str) and delta["content"]:
                yield TextDelta(delta["content"])
            for part in delta.get("tool_calls") or ():
                if not isinstance(part, dict):
                    continue
                index = part.get("index", len(calls))
                if not isinstance(index, int) or index < 0:
                    continue
                if index not in calls and len(calls) >= MAX_TOOL_CALLS:
                    continue
                calls.setdefault(index, _CallParts()).add(part)
        for n, index in enumerate(sorted(calls), start=1):
            yield ToolCallChunk(calls[index].finish(f"call_{n}"))
        yield Done(usage=choices.usage, reason=choices.reason, served_by=self.base_url)

    async def context_window(self, model: str) -> int | None:
        if model in self._windows:
            return self._windows[model]
        window: int | None = None
        try:
            resp = await self._http.get("/models", headers={"Accept": "application/json"})
            items = resp.json().get("data", []) if resp.status_code == 200 else []
        except (httpx.HTTPError, ValueError, AttributeError):
            items = []
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict) and item.get("id") == model:
                for key in ("context_length", "max_model_len", "context_window"):
                    if isinstance(item.get(key), int) and item[key] > 0:
                        window = item[key]
                meta = item.get("meta")
                if window is None and isinstance(meta, dict):
                    n_ctx = meta.get("n_ctx_train")
                    window = n_ctx if isinstance(n_ctx, int) and n_ctx > 0 else None
        self._windows[model] = window
        return window

