"""`AsyncNaviClient`: the control API for asyncio (httpx.AsyncClient). Its calls are
`navi_client.api`'s and `navi_client.api_work`'s (shared with `NaviClient`): the same
methods, awaited (streams iterated with `async for`); here is only how it sends."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TypeVar

import httpx

from navi_client import config
from navi_client.api import CoreAPI
from navi_client.api_work import WorkAPI
from navi_client.calls import Call, Stream
from navi_client.endpoint import AsyncSender
from navi_client.errors import error_from_response

T = TypeVar("T")


class AsyncNaviClient(CoreAPI, WorkAPI, AsyncSender):
    """`AsyncNaviClient(url, token)`; both default to `NAVI_URL` and `NAVI_TOKEN`. Use it as
    an async context manager (or `await aclose()`). Every method of `NaviClient` is here,
    awaitable; error answers raise `NaviAPIError`'s subclasses."""

    def __init__(self, url: str | None = None, token: str | None = None, *,
                 headers: dict[str, str] | None = None,
                 timeout: httpx.Timeout | float = config.TIMEOUT,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        options = config.http_options(url, token, headers, timeout)
        self.url = str(options["base_url"])
        self.http = httpx.AsyncClient(**options, transport=transport)  # type: ignore[arg-type]

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

    async def open_stream(self, stream: Stream[T]) -> AsyncIterator[T]:
        """Open a `Stream` and yield what its reader makes of each line."""
        async with self.http.stream(**stream.request) as resp:
            await _raise_for(resp)
            reader = stream.reader()
            async for line in resp.aiter_lines():
                for item in reader.feed(line):
                    yield item
                if reader.done:
                    return
            reader.end()


async def _raise_for(resp: httpx.Response) -> None:
    if resp.status_code >= 400:
        await resp.aread()
        raise error_from_response(resp.status_code, resp.content, resp.headers.get("retry-after"))
