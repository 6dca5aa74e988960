"""What a request is, without I/O: a plain call (`Call`: method, path, body, and how to read
the answer) or a stream (`Stream`: what to open and how to read its lines). `NaviClient` and
`AsyncNaviClient` each send them their own way (`send`, `open_stream`); the API itself is
written once, in `navi_client.api`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter

from navi_client import config
from navi_client.errors import InvalidPathSegment
from navi_client.models import Event, ExecChunk
from navi_client.sse import SSEDecoder, ended_early, event_of, exec_item
from navi_client.wire import ExecOut

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    read: Callable[[httpx.Response], T]
    params: dict[str, Any] | None = None
    json: Any = None
    content: bytes | None = None
    max_bytes: int | None = None  # refuse a larger answer before reading it


class Reader(Protocol[T_co]):
    """Reads a stream's lines: `feed` answers the items a line completes; `done` once the
    stream has said all it will; `end` at the end of the body (raises if it ended early)."""

    done: bool

    def feed(self, line: str) -> Sequence[T_co]: ...

    def end(self) -> None: ...


@dataclass(frozen=True)
class Stream(Generic[T]):
    request: dict[str, Any]  # `httpx` `stream()`'s arguments
    reader: Callable[[], Reader[T]]


def one(model: type[M]) -> Callable[[httpx.Response], M]:
    return lambda resp: model.model_validate_json(resp.content)


def many(model: type[M]) -> Callable[[httpx.Response], list[M]]:
    adapter = TypeAdapter(list[model])  # type: ignore[valid-type]
    return lambda resp: adapter.validate_json(resp.content)


def nothing(_: httpx.Response) -> None:
    return None


def raw(resp: httpx.Response) -> bytes:
    return resp.content


def manual_text(resp: httpx.Response) -> str:
    return resp.text


def _no_dots(value: str, what: str) -> None:
    """'.' and '..' are not names: the HTTP library would collapse them into another route
    (``delete_file(s, "../../s_2")`` would have sent ``DELETE /v1/sessions/s_2``)."""
    if any(part in (".", "..") for part in value.split("/")):
        raise InvalidPathSegment(f"{what} {value!r} has a '.' or '..' segment")


def seg(value: str) -> str:
    """One path segment (an id, a name): nothing in it can reach another route."""
    _no_dots(value, "segment")
    return quote(value, safe="")


def session_path(session: str, *rest: str) -> str:
    """`/v1/sessions/<session>/<rest...>`, each part of `rest` one segment."""
    return "/".join([f"/v1/sessions/{seg(session)}", *(seg(part) for part in rest)])


def file_path(session: str, path: str) -> str:
    """`/files/<path>`: '/' stays the separator, '?', '#' and '%' are names. `/tmp/...` is
    the session's /tmp (its leading '/' sent as `%2F`); any other leading '/' is dropped.
    A '.' or '..' segment is refused (``InvalidPathSegment``), never sent."""
    _no_dots(path, "path")
    if path == "/tmp" or path.startswith("/tmp/"):
        return f"{session_path(session)}/files/%2F{quote(path[1:], safe='/')}"
    return f"{session_path(session)}/files/{quote(path.lstrip('/'), safe='/')}"


def drop_none(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


# ---- streams --------------------------------------------------------------------------

@dataclass
class ExecReader:
    """A streamed exec: its output (`ExecChunk`) then its result (`ExecOut`, last); an
    `error` frame raises the API's exception."""

    done: bool = False
    decoder: SSEDecoder = field(default_factory=SSEDecoder)

    def feed(self, line: str) -> list[ExecChunk | ExecOut]:
        frame = self.decoder.feed(line)
        item = exec_item(frame[1]) if frame else None
        self.done = isinstance(item, ExecOut)
        return [] if item is None else [item]

    def end(self) -> None:
        raise ended_early()


@dataclass
class EventReader:
    """A session's event stream: each frame an `Event`, until the connection ends."""

    done: bool = False
    decoder: SSEDecoder = field(default_factory=SSEDecoder)

    def feed(self, line: str) -> list[Event]:
        frame = self.decoder.feed(line)
        return [] if frame is None else [event_of(*frame)]

    def end(self) -> None:
        return None


def exec_stream(path: str, body: dict[str, Any]) -> Stream[ExecChunk | ExecOut]:
    """A POST answered as SSE (`?stream=true`), read as a streamed exec."""
    return Stream({"method": "POST", "url": path, "params": {"stream": "true"}, "json": body,
                   "timeout": config.STREAM_TIMEOUT}, ExecReader)


def event_stream(session: str, last_event_id: int | None, read_timeout: float | None
                 ) -> Stream[Event]:
    return Stream({"method": "GET", "url": session_path(session, "events"),
                   "headers": config.last_event_headers(last_event_id),
                   "timeout": config.stream_timeout(read_timeout)}, EventReader)
