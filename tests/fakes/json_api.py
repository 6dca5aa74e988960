"""A scripted JSON API on 127.0.0.1 (GET only), for tools that reach a host through the
egress proxy: `answer(request)` returns (status, JSON value) and may record what it saw."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = Callable[[BaseHTTPRequestHandler], tuple[int, Any]]


class QuietHandler(BaseHTTPRequestHandler):
    """A test site's handler: ``send(status, body, content_type)``, no access log."""

    def send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    """A threaded HTTP server on 127.0.0.1 with ``handler`` until the block ends; yields
    its port (the one way tests run a small site of their own)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield int(httpd.server_address[1])
    finally:
        httpd.shutdown()
        httpd.server_close()


@contextmanager
def json_api(answer: Answer) -> Iterator[int]:
    """Serve until the block ends; yields the port."""

    class Handler(QuietHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            status, value = answer(self)
            self.send(status, json.dumps(value).encode(), "application/json")

    with serving(Handler) as port:
        yield port
