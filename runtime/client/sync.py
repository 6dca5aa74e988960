"""`NaviClient`: the control API, blocking (httpx.Client). The plain calls are
`runtime.client.calls`' (shared with `AsyncNaviClient`); the streams are here."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeVar

import httpx

from runtime.client import config
from runtime.client.calls import Call, SyncEndpoints, events_request, exec_stream_request
from runtime.client.errors import error_from_response
from runtime.client.models import Event, ExecChunk, ExecOut
from runtime.client.sse import SSEDecoder, ended_early, event_of, exec_item

T = TypeVar("T")


class NaviClient(SyncEndpoints):
    """`NaviClient(url, token)`; both default to `NAVI_URL` and `NAVI_TOKEN`. Use it as a
    context manager (or `close()` it). Errors raise `NaviAPIError`'s subclasses."""

    def __init__(self, url: str | None = None, token: str | None = None, *,
                 headers: dict[str, str] | None = None,
                 timeout: httpx.Timeout | float = config.TIMEOUT,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.url = config.base_url(url)
        self.http = httpx.Client(base_url=self.url, headers=config.headers(token, headers),
                                 timeout=timeout, transport=transport)

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
            resp.read()
            return call.read(resp)

    def exec_stream(self, session: str, tool: str, args: dict[str, Any] | None = None,
                    timeout_s: float | None = None) -> Iterator[ExecChunk | ExecOut]:
        """Run a tool and yield its output as it comes (`ExecChunk`), then its result
        (`ExecOut`, last). A call that fails raises, before or after its output."""
        with self.http.stream(**exec_stream_request(session, tool, args, timeout_s)) as resp:
            _raise_for(resp)
            decoder = SSEDecoder()
            for line in resp.iter_lines():
                frame = decoder.feed(line)
                item = exec_item(frame[1]) if frame else None
                if item is not None:
                    yield item
                    if isinstance(item, ExecOut):
                        return
            raise ended_early()

    def events(self, session: str, last_event_id: int | None = None,
               read_timeout: float | None = None) -> Iterator[Event]:
        """The session's events as they happen; with `last_event_id` (an event's `id`), only
        those after it (what a reconnecting reader missed is replayed first). The server
        sends a keep-alive every 15 s: `read_timeout` (seconds) above that only ends a dead
        connection (`httpx.ReadTimeout`); None waits for ever."""
        with self.http.stream(**events_request(session, last_event_id, read_timeout)) as resp:
            _raise_for(resp)
            decoder = SSEDecoder()
            for line in resp.iter_lines():
                frame = decoder.feed(line)
                if frame is not None:
                    yield event_of(*frame)


def _raise_for(resp: httpx.Response) -> None:
    if resp.status_code >= 400:
        resp.read()
        raise error_from_response(resp.status_code, resp.content, resp.headers.get("retry-after"))
