"""A cap on request bodies, enforced before any route (or authentication) sees them.

FastAPI reads a JSON body into memory before the route's dependencies run, so without a
cap anyone, even without a token, could make the supervisor buffer gigabytes. This ASGI
middleware answers 413 `too_large` as soon as `Content-Length` or the bytes received pass
`MAX_BODY_BYTES`. File uploads (`PUT /v1/sessions/{id}/files/{path}`) are exempt: they
stream to disk and enforce the policy's upload limit themselves.
"""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# The largest argument a tool takes is `filesystem write`'s 10 MiB of text; bigger files go
# through the streamed upload. JSON is parsed on the event loop (the C parser holds the GIL,
# so a thread would not free the loop): ~30 ms per MiB here, so this bound is also what
# keeps one request from stalling every other (healthz within 1 s under a flood).
MAX_BODY_BYTES = 12 * 1024 * 1024
UPLOAD_PATH = re.compile(r"^/v1/sessions/[^/]+/files/.")
E2B_UPLOAD_PATH = "/e2b/files"  # envd's uploads (runtime.e2b.envd_http): streamed, capped there


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope["method"] == "PUT"
                                       and UPLOAD_PATH.match(scope["path"])) or (
                scope["method"] == "POST" and scope["path"] == E2B_UPLOAD_PATH):
            await self.app(scope, receive, send)
            return
        length = _content_length(scope)
        if length is not None and length > self.max_bytes:
            await _too_large(send, self.max_bytes)
            return
        # Read the whole (bounded) body first, then replay it to the app.
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                messages.append(message)  # a disconnect: let the app see it
                break
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                await _too_large(send, self.max_bytes)
                return
            messages.append(message)
            if not message.get("more_body", False):
                break
        replay = iter(messages)

        async def replay_receive() -> Message:
            message = next(replay, None)
            return message if message is not None else await receive()

        await self.app(scope, replay_receive, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isascii() and text.isdigit() and len(text) < 19 else None
    return None


async def _too_large(send: Send, limit: int) -> None:
    body: dict[str, Any] = {"error": {"code": "too_large", "limit": limit,
                                      "message": f"request body exceeds {limit} bytes"}}
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(data)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": data})
