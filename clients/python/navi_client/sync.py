"""`NaviClient`: the control API, blocking (httpx.Client). Its calls are `navi_client.api`'s
and `navi_client.api_work`'s (shared with `AsyncNaviClient`); here is only how it sends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

import httpx

from navi_client import config
from navi_client.api import CoreAPI
from navi_client.api_work import WorkAPI
from navi_client.calls import Call, Stream
from navi_client.endpoint import SyncSender
from navi_client.errors import error_from_response

T = TypeVar("T")


class NaviClient(CoreAPI, WorkAPI, SyncSender):
    """`NaviClient(url, token)`; both default to `NAVI_URL` and `NAVI_TOKEN`. Use it as a
    context manager (or `close()` it). Error answers raise `NaviAPIError`'s subclasses."""

    def __init__(self, url: str | None = None, token: str | None = None, *,
                 headers: dict[str, str] | None = None,
                 timeout: httpx.Timeout | float = config.TIMEOUT,
                 transport: httpx.BaseTransport | None = None) -> None:
        options = config.http_options(url, token, headers, timeout)
        self.url = str(options["base_url"])
        self.http = httpx.Client(**options, transport=transport)  # type: ignore[arg-type]

    def __enter__(self) -> NaviClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def send(self, call: Call[T]) -> T:
        """Send one `Call` and read its answer (every plain method goes through here)."""
        with self.http.stream(call.method, call.path, params=call.params, json=call.json,
                              content=call.content) as resp:
            _raise_for(resp)
            config.check_size(resp, call.max_bytes)
            return call.read(_read(resp))

    def open_stream(self, stream: Stream[T]) -> Iterator[T]:
        """Open a `Stream` and yield what its reader makes of each line."""
        with self.http.stream(**stream.request) as resp:
            _raise_for(resp)
            reader = stream.reader()
            for line in resp.iter_lines():
                yield from reader.feed(line)
                if reader.done:
                    return
            reader.end()


def _read(resp: httpx.Response) -> httpx.Response:
    resp.read()
    return resp


def _raise_for(resp: httpx.Response) -> None:
    if resp.status_code >= 400:
        resp.read()
        raise error_from_response(resp.status_code, resp.content, resp.headers.get("retry-after"))
