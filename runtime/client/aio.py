"""`AsyncNaviClient`: the control API for asyncio (httpx.AsyncClient). The plain calls are
`runtime.client.calls`' (shared with `NaviClient`); the streams are here."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypeVar

import httpx

from runtime.client import config
from runtime.client.calls import AsyncEndpoints, Call, events_request, exec_stream_request
from runtime.client.errors import error_from_response
from runtime.client.models import Event, ExecChunk, ExecOut
from runtime.client.sse import SSEDecoder, ended_early, event_of, exec_item

T = TypeVar("T")


class AsyncNaviClient(AsyncEndpoints):
    """`AsyncNaviClient(url, token)`; both default to `NAVI_URL` and `NAVI_TOKEN`. Use it as
    an async context manager (or `await aclose()`). Errors raise `NaviAPIError`'s
    subclasses. Every method of `NaviClient` is here, awaitable."""

    def __init__(self, url: str | None = None, token: str | None = None, *,
                 headers: dict[str, str] | None = None,
                 timeout: httpx.Timeout | float = config.TIMEOUT,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.url = config.base_url(url)
        self.http = httpx.AsyncClient(base_url=self.url, headers=config.headers(token, headers),
                                      timeout=timeout, transport=transport)

    async def __aenter__(self) -> AsyncNaviClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def send(self, call: Call[T]) -> T:
        """Send one `Call` and read its answer (every plain method goes through here)."""
        async with self.http.stream(call.method, call.path, params=call.params,
                                    json=call.json, content=call.content) as resp:
            await _raise_for(resp)
            config.check_size(resp, call.max_bytes)
            await resp.aread()
            return call.read(resp)

    async def exec_stream(self, session: str, tool: str, args: dict[str, Any] | None = None,
                          timeout_s: float | None = None
                          ) -> AsyncIterator[ExecChunk | ExecOut]:
        """Run a tool and yield its output as it comes (`ExecChunk`), then its result
        (`ExecOut`, last). A call that fails raises, before or after its output."""
        async with self.http.stream(**exec_stream_request(session, tool, args, timeout_s)) as resp:
            await _raise_for(resp)
            decoder = SSEDecoder()
            async for line in resp.aiter_lines():
                frame = decoder.feed(line)
                item = exec_item(frame[1]) if frame else None
                if item is not None:
                    yield item
                    if isinstance(item, ExecOut):
                        return
            raise ended_early()

    async def events(self, session: str, last_event_id: int | None = None,
                     read_timeout: float | None = None) -> AsyncIterator[Event]:
        """The session's events as they happen; with `last_event_id` (an event's `id`), only
        those after it (what a reconnecting reader missed is replayed first). The server
        sends a keep-alive every 15 s: `read_timeout` (seconds) above that only ends a dead
        connection (`httpx.ReadTimeout`); None waits for ever."""
        async with self.http.stream(**events_request(session, last_event_id, read_timeout)) as resp:
            await _raise_for(resp)
            decoder = SSEDecoder()
            async for line in resp.aiter_lines():
                frame = decoder.feed(line)
                if frame is not None:
                    yield event_of(*frame)


async def _raise_for(resp: httpx.Response) -> None:
    if resp.status_code >= 400:
        await resp.aread()
        raise error_from_response(resp.status_code, resp.content, resp.headers.get("retry-after"))
