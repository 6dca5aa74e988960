"""The configured model server first; the embedded model when none answers.

`FallbackBackend` streams from the primary backend (Ollama hosts or an OpenAI-compatible
server). If that fails before any output with `LLMUnavailable`, it says so with a `Notice`
(the UI shows which model is serving and that a first use installs it), starts the
embedded server (`EmbeddedServer`) and answers from it. While the embedded model serves,
the primary is tried again every `retry_primary_s`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator

from runtime.agent.llm.embedded import CONTEXT, MAX_TOKENS, MODEL_ALIAS, EmbeddedServer
from runtime.agent.llm.embedded_backend import EmbeddedBackend
from runtime.agent.llm.types import ChatRequest, Chunk, LLMBackend, Notice
from runtime.errors import LLMUnavailable
from runtime.logging import get_logger

log = get_logger(__name__)


class FallbackBackend:
    def __init__(self, primary: LLMBackend, embedded: EmbeddedServer, *,
                 timeout_s: float = 300.0, retry_primary_s: float = 300.0) -> None:
        self.primary = primary
        self.embedded = embedded
        self.timeout_s = timeout_s
        self.retry_primary_s = retry_primary_s
        self._backend: EmbeddedBackend | None = None
        self._active = False
        self._retry_at = 0.0

    @property
    def name(self) -> str:
        return "embedded" if self._active else self.primary.name

    def model_for(self, requested: str) -> str:
        return MODEL_ALIAS if self._active else requested

    async def stream(self, request: ChatRequest) -> AsyncGenerator[Chunk, None]:
        if self._active and time.monotonic() < self._retry_at:
            async for chunk in self._embedded(request):
                yield chunk
            return
        started = False
        try:
            async for chunk in self.primary.stream(request):
                started = True
                yield chunk
            if self._active:
                log.warning("model_server_back", backend=self.primary.name)
            self._active = False
            return
        except LLMUnavailable as exc:
            if started:
                raise
            reason = exc.message
        first_use = "" if self.embedded.installed() else (
            " It is installed first (once; building llama.cpp takes a few minutes).")
        if not self._active:
            log.warning("model_server_unavailable", reason=reason[:300],
                        fallback=MODEL_ALIAS)
            yield Notice(f"No model server answered ({reason[:200]}). Serving with the "
                         f"embedded model {MODEL_ALIAS} on this machine.{first_use}")
        async for chunk in self._embedded(request):
            yield chunk

    async def _ready(self) -> AsyncGenerator[Notice | str, None]:
        """The embedded server's URL (last), after a Notice per install phase on the way."""
        heard: asyncio.Queue[Notice] = asyncio.Queue()

        def on_progress(phase: str, fraction: float, message: str) -> None:
            heard.put_nowait(Notice(message, phase=phase, progress=round(fraction, 3)))

        task = asyncio.ensure_future(self.embedded.ensure(on_progress))
        try:
            while not task.done() or not heard.empty():
                getter = asyncio.ensure_future(heard.get())
                await asyncio.wait({task, getter}, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    yield getter.result()
                else:
                    getter.cancel()
            yield task.result()
        finally:
            if not task.done():
                task.cancel()

    async def _embedded(self, request: ChatRequest) -> AsyncGenerator[Chunk, None]:
        url = ""
        async for step in self._ready():
            if isinstance(step, Notice):
                yield step
            else:
                url = step
        if self._backend is None or self._backend.base_url != url:
            if self._backend is not None:
                await self._backend.close()
            self._backend = EmbeddedBackend(url, timeout_s=self.timeout_s)
        if not self._active:
            self._retry_at = time.monotonic() + self.retry_primary_s
        self._active = True
        local = request.model_copy(update={
            "model": MODEL_ALIAS, "think": None, "max_tokens": MAX_TOKENS,
            "num_ctx": min(request.num_ctx or CONTEXT, CONTEXT)})
        async for chunk in self._backend.stream(local):
            yield chunk

    async def context_window(self, model: str) -> int | None:
        if self._active:
            return CONTEXT
        return await self.primary.context_window(model)

    async def sees_images(self, model: str) -> bool | None:
        if self._active:
            return False  # the embedded model reads text only
        sees = getattr(self.primary, "sees_images", None)
        return await sees(model) if sees is not None else None

    async def close(self) -> None:
        await self.primary.close()
        if self._backend is not None:
            await self._backend.close()
        await self.embedded.close()
