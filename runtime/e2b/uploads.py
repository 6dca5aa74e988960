"""Streamed `multipart/form-data` uploads for envd's `POST /files`.

The SDK sends each file as a part named `file` whose filename is the target path (or one part
and `?path=`). Parts are parsed with `python-multipart`'s push parser as the body arrives and
handed on chunk by chunk, so no upload is held in memory or spooled anywhere but its target;
part headers and the number of parts are bounded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from python_multipart.multipart import MultipartParser, parse_options_header

from runtime.errors import InvalidInput

MAX_PARTS = 256


@dataclass
class _State:
    header_field: bytearray = field(default_factory=bytearray)
    header_value: bytearray = field(default_factory=bytearray)
    headers: dict[str, bytes] = field(default_factory=dict)
    events: list[tuple[str, bytes]] = field(default_factory=list)
    parts: int = 0


def boundary_of(content_type: str) -> bytes:
    kind, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if kind != b"multipart/form-data" or not boundary or len(boundary) > 200:
        raise InvalidInput("expected multipart/form-data with a boundary, or "
                           "application/octet-stream with ?path=")
    return boundary


async def parts(content_type: str, body: AsyncIterator[bytes]
                ) -> AsyncIterator[tuple[str, AsyncIterator[bytes]]]:
    """(filename, its chunks) for each file part, in order; each part's chunks must be
    consumed before the next part is asked for."""
    state = _State()

    def on_header_field(data: bytes, start: int, end: int) -> None:
        state.header_field += data[start:end]

    def on_header_value(data: bytes, start: int, end: int) -> None:
        state.header_value += data[start:end]

    def on_header_end() -> None:
        state.headers[bytes(state.header_field).decode("latin-1").lower()] = \
            bytes(state.header_value)
        state.header_field.clear()
        state.header_value.clear()

    def on_headers_finished() -> None:
        _, options = parse_options_header(state.headers.get("content-disposition", b""))
        name = options.get(b"filename") or b""
        state.parts += 1
        state.events.append(("begin", name))
        state.headers = {}

    def on_part_data(data: bytes, start: int, end: int) -> None:
        state.events.append(("data", bytes(data[start:end])))

    def on_part_end() -> None:
        state.events.append(("end", b""))

    parser = MultipartParser(boundary_of(content_type), {
        "on_header_field": on_header_field, "on_header_value": on_header_value,
        "on_header_end": on_header_end, "on_headers_finished": on_headers_finished,
        "on_part_data": on_part_data, "on_part_end": on_part_end,
    }, max_header_count=16)

    async def events() -> AsyncIterator[tuple[str, bytes]]:
        async for chunk in body:
            parser.write(chunk)
            if state.parts > MAX_PARTS:
                raise InvalidInput(f"at most {MAX_PARTS} files per upload")
            pending, state.events = state.events, []
            for event in pending:
                yield event
        parser.finalize()
        pending, state.events = state.events, []
        for event in pending:
            yield event

    stream = events()

    async def part_chunks() -> AsyncIterator[bytes]:
        async for kind, data in stream:
            if kind == "data":
                yield data
            elif kind == "end":
                return
        raise InvalidInput("the upload ended inside a part")

    async for kind, data in stream:
        if kind == "begin":
            yield data.decode("utf-8", "replace"), part_chunks()
