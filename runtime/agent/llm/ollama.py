"""Ollama through the `ollama` AsyncClient, over a list of hosts with failover.

A host is abandoned for the next one only before it has streamed anything: once output
went to the user, switching servers would duplicate it, so a failure mid-answer is an
`LLMError`. Failing hosts are blacklisted for a while (`HostPool`). A model that does not
support thinking gets the request again without `think` (remembered per host and model).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import httpx
from ollama import AsyncClient, ResponseError
from pydantic import ValidationError

from runtime.agent.llm import types as llm
from runtime.agent.llm.hosts import HostPool
from runtime.errors import LLMError, LLMUnavailable
from runtime.logging import get_logger

log = get_logger(__name__)

CONNECT_TIMEOUT_S = 5.0
_FAILOVER_STATUS = {404, 408, 429, 500, 502, 503, 504}  # 404: model not on this host


class _HostFailed(Exception):
    """Internal: this host is unusable for this request; try the next one."""


def to_ollama_messages(messages: list[llm.ChatMessage]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        item: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.tool_calls:
            item["tool_calls"] = [
                {"function": {"name": c.name, "arguments": c.arguments or {}}}
                for c in m.tool_calls
            ]
        if m.role == "tool" and m.tool_name:
            item["tool_name"] = m.tool_name
        if m.images:
            item["images"] = [i.data_b64 for i in m.images]
        out.append(item)
    return out


def to_ollama_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": t["name"], "description":
             t.get("description", ""), "parameters": t.get("parameters") or {"type": "object"}}}
            for t in tools]


class OllamaBackend:
    name = "ollama"

    def __init__(self, hosts: list[str], *, timeout_s: float = 300.0,
                 blacklist_s: float = 60.0, pool: HostPool | None = None) -> None:
        self.pool = pool or HostPool(hosts, blacklist_s)
        self.timeout = httpx.Timeout(timeout_s, connect=min(CONNECT_TIMEOUT_S, timeout_s))
        self._clients: dict[str, AsyncClient] = {}
        self._no_think: set[tuple[str, str]] = set()
        self._windows: dict[str, int | None] = {}
        self._vision: dict[str, bool] = {}

    def _client(self, host: str) -> AsyncClient:
        client = self._clients.get(host)
        if client is None:
            client = self._clients[host] = AsyncClient(host=host, timeout=self.timeout)
        return client

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()  # type: ignore[no-untyped-call]  # ollama's is unannotated
        self._clients.clear()

    async def stream(self, request: llm.ChatRequest) -> AsyncGenerator[llm.Chunk, None]:
        problems: list[str] = []
        for host in self.pool.candidates():
            started = False
            try:
                async for chunk in self._stream_host(host, request):
                    started = True
                    yield chunk
                self.pool.succeeded(host)
                return
            except _HostFailed as exc:
                if started:  # output already reached the user: no silent switch
                    raise LLMError(f"Ollama at {host} failed mid-answer: {exc}") from None
                self.pool.failed(host)
                problems.append(f"{host}: {exc}")
                log.warning("ollama_host_failed", host=host, error=str(exc),
                            blacklisted_s=self.pool.blacklist_s)
        raise LLMUnavailable("no Ollama host answered: " + "; ".join(problems)[:1500],
                             hosts=self.pool.hosts)

    async def _stream_host(self, host: str, request: llm.ChatRequest) -> AsyncIterator[llm.Chunk]:
        think = None if (host, request.model) in self._no_think else request.think
        try:
            try:
                parts = await self._open(host, request, think)
                first = await anext(parts, None)
            except ResponseError as exc:
                if not (think and exc.status_code == 400 and "think" in str(exc.error).lower()):
                    raise
                self._no_think.add((host, request.model))
                log.info("ollama_model_cannot_think", host=host, model=request.model)
                parts = await self._open(host, request, None)
                first = await anext(parts, None)
            if first is None:
                raise _HostFailed("empty answer")
            async for chunk in self._chunks(host, _prepend(first, parts)):
                yield chunk
        except ResponseError as exc:
            raise LLMError(f"Ollama at {host}: {str(exc.error)[:500]}",
                           status=exc.status_code) from None

    async def _open(self, host: str, request: llm.ChatRequest, think: bool | None
                    ) -> AsyncIterator[Any]:
        options: dict[str, Any] = {}
        if request.temperature is not None:
            options["temperature"] = request.temperature
        if request.num_ctx:
            options["num_ctx"] = request.num_ctx
        if request.max_tokens:
            options["num_predict"] = request.max_tokens
        try:
            stream = await self._client(host).chat(
                model=request.model, messages=to_ollama_messages(request.messages),
                tools=to_ollama_tools(request.tools) or None, stream=True, think=think,
                options=options or None,
            )
        except (ConnectionError, httpx.TransportError) as exc:
            raise _HostFailed(_describe(exc)) from None
        return _guard(stream)

    async def _chunks(self, host: str, parts: AsyncIterator[Any]) -> AsyncIterator[llm.Chunk]:
        counter = itertools.count(1)
        async for part in parts:
            message = part.message
            if message is not None:
                if message.thinking:
                    yield llm.ThinkingDelta(message.thinking)
                if message.content:
                    yield llm.TextDelta(message.content)
                for call in message.tool_calls or ():
                    yield llm.ToolCallChunk(llm.ToolCallRequest.parsed(
                        f"call_{next(counter)}", str(call.function.name), call.function.arguments))
            if part.done:
                usage = llm.Usage(prompt_tokens=part.prompt_eval_count or 0,
                                  completion_tokens=part.eval_count or 0)
                yield llm.Done(usage=usage, reason=part.done_reason, served_by=host)
                return
        raise LLMError(f"Ollama at {host} ended the answer without finishing it")

    async def context_window(self, model: str) -> int | None:
        if model in self._windows:
            return self._windows[model]
        window: int | None = None
        for host in self.pool.candidates():
            try:
                shown = await self._client(host).show(model)
            except (ConnectionError, httpx.TransportError, ResponseError, ValidationError):
                continue
            self._vision[model] = "vision" in (shown.capabilities or [])
            info = dict(shown.modelinfo or {})
            for key, value in info.items():
                if key.endswith(".context_length") and isinstance(value, int) and value > 0:
                    window = value
            break
        self._windows[model] = window
        return window

    async def sees_images(self, model: str) -> bool | None:
        """Whether the model takes images (Ollama's `vision` capability); None: unknown."""
        if model not in self._windows:
            await self.context_window(model)
        return self._vision.get(model)


async def _guard(stream: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """Map the client's errors: before/while streaming, transport trouble is a host failure."""
    try:
        async for part in stream:
            yield part
    except (ConnectionError, httpx.TransportError) as exc:
        raise _HostFailed(_describe(exc)) from None
    except ResponseError as exc:
        if exc.status_code in _FAILOVER_STATUS:
            raise _HostFailed(f"HTTP {exc.status_code}: {str(exc.error)[:300]}") from None
        raise
    except ValidationError as exc:
        raise LLMError(f"Ollama sent a malformed answer ({exc.error_count()} problems)") from None
    except ValueError as exc:  # a line that is not JSON
        raise LLMError(f"Ollama sent a malformed answer: {str(exc)[:200]}") from None


async def _prepend(first: Any, rest: AsyncIterator[Any]) -> AsyncIterator[Any]:
    yield first
    async for item in rest:
        yield item


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text[:300]
