"""An OTLP/HTTP trace receiver on 127.0.0.1: accepts `POST /v1/traces` (protobuf), keeps
every body as it came (to search for what must never be exported) and decodes the spans
with `opentelemetry-proto`'s classes."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass
class Span:
    name: str
    span_id: str
    parent_id: str  # "" for a root
    trace_id: str
    attributes: dict[str, Any]
    status: int  # 0 unset, 1 ok, 2 error
    events: list[str]


@dataclass
class Receiver:
    url: str = ""
    bodies: list[bytes] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)

    def raw(self) -> bytes:
        return b"".join(self.bodies)

    def spans(self) -> list[Span]:
        found: list[Span] = []
        for body in list(self.bodies):
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    found += [_span(s) for s in scope.spans]
        return found


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def _span(s: Any) -> Span:
    return Span(name=s.name, span_id=s.span_id.hex(), parent_id=s.parent_span_id.hex(),
                trace_id=s.trace_id.hex(),
                attributes={a.key: _value(a.value) for a in s.attributes},
                status=s.status.code, events=[e.name for e in s.events])


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """Serve until the block ends."""
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            state.paths.append(self.path)
            ok = self.path == "/v1/traces"
            if ok:
                state.bodies.append(body)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200 if ok else 404)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
