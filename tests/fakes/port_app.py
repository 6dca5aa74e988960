"""A program that serves a port, for the ports tests (stdlib only: it runs inside sandboxes).

``python3 port_app.py PORT``: on 127.0.0.1:PORT, HTTP/1.1 with keep-alive:
  /headers  -> the request's headers as JSON (what the proxy let through)
  /sse      -> three server-sent events, 0.2 s apart (streamed, not buffered)
  /echo     -> POST body back
  /ws       -> a WebSocket that echoes each text message with "echo: " in front
  /page     -> an HTML page (the browser test's preview)
  anything else -> "hello <path>"
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import struct
import sys
import time

WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
PAGE = b"""<!doctype html><html><body><h1 id="t">preview</h1><script>
window.probe = () => {
  const out = {origin: location.origin, token: null, foreign: null};
  try { out.token = localStorage.getItem("navi.token"); } catch (e) { out.token = "error"; }
  try { out.mine = localStorage.getItem("mine"); } catch (e) { out.mine = "error"; }
  return out;
};
</script></body></html>"""


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, status: int, body: bytes, kind: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        if self.path == "/headers":
            self._send(200, json.dumps(dict(self.headers.items())).encode(), "application/json")
        elif self.path == "/sse":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            for i in range(3):
                self.wfile.write(b"data: tick %d %f\n\n" % (i, time.time()))
                self.wfile.flush()
                time.sleep(0.2)
            self.close_connection = True
        elif self.path == "/ws":
            self._websocket()
        elif self.path == "/page":
            self._send(200, PAGE, "text/html")
        else:
            self._send(200, b"hello " + self.path.encode())

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._send(200, body)

    def _websocket(self) -> None:
        key = self.headers["Sec-WebSocket-Key"].encode()
        accept = base64.b64encode(hashlib.sha1(key + WS_GUID).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        while True:
            head = self.rfile.read(2)
            if len(head) < 2:
                return
            opcode, length = head[0] & 0x0F, head[1] & 0x7F
            if length == 126:
                length = struct.unpack("!H", self.rfile.read(2))[0]
            elif length == 127:
                length = struct.unpack("!Q", self.rfile.read(8))[0]
            mask = self.rfile.read(4) if head[1] & 0x80 else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(length)))
            if opcode == 8:
                self._frame(8, data[:2])
                return
            if opcode == 1:
                self._frame(1, b"echo: " + data)

    def _frame(self, opcode: int, data: bytes) -> None:
        n = len(data)
        head = bytes([0x80 | opcode]) + (bytes([n]) if n < 126 else
                                         bytes([126]) + struct.pack("!H", n))
        self.wfile.write(head + data)
        self.wfile.flush()


def main() -> None:
    port = int(sys.argv[1])
    http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
