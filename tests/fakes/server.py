"""A threaded HTTP/1.1 server on 127.0.0.1 for fakes: JSON answers and chunked streams."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Pause:
    """In a stream: sleep this long before the next piece."""

    seconds: float


@dataclass
class Answer:
    status: int = 200
    body: Any = None                                # JSON, for plain answers
    stream: Iterator[bytes | Pause] | None = None  # chunked body pieces
    content_type: str = "application/json"


class FakeServer:
    """Subclasses implement `route(method, path, headers, body) -> Answer`."""

    def __init__(self, port: int = 0) -> None:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                answer = fake.route(method, self.path, dict(self.headers), body)
                self.send_response(answer.status)
                self.send_header("Content-Type", answer.content_type)
                if answer.stream is None:
                    data = json.dumps(answer.body).encode()
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for piece in answer.stream:
                        if isinstance(piece, Pause):
                            if fake.wait(piece.seconds):
                                return  # server closing: drop the connection
                            continue
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self) -> None:  # noqa: N802
                self._serve("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._serve("POST")

        self._closing = threading.Event()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,),
                                        daemon=True)

    def route(self, method: str, path: str, headers: dict[str, str], body: Any) -> Answer:
        raise NotImplementedError

    def wait(self, seconds: float) -> bool:
        """Sleep, waking early (True) when the server closes."""
        return self._closing.wait(seconds)

    def start(self) -> FakeServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
