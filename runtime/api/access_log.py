"""One structured log line per HTTP request, written once its response has been sent.

Replaces uvicorn's access log, which is plain text (a JSON log stream got non-JSON lines)
and is written inside the response, between its head and its body: ≈ 0.5 ms on every
answer's path on the dev machine. This one goes through structlog like every other line,
carries the request's bound context (tenant, token id, session) and the time the response
took (for a stream: how long it was open), and costs the caller nothing. The query string
is left out: the path says what was asked; a link's token (`/v1/shared/…`,
`/v1/published/…`: a capability, like a bearer token) is not logged.
"""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runtime.logging import get_logger

log = get_logger("navi.http")
_CAPABILITY_PATHS = ("/v1/shared/", "/v1/published/")


def shown_path(path: str) -> str:
    for prefix in _CAPABILITY_PATHS:
        if path.startswith(prefix):
            return prefix + "[token]"
    return path


class AccessLog:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0  # none sent: the connection went away first

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        except Exception:
            status = status or 500  # the error middleware outside answers it
            raise
        finally:
            client = scope.get("client")
            log.info("http_request", method=scope["method"], path=shown_path(scope["path"]),
                     status=status, ms=round((time.perf_counter() - started) * 1000, 1),
                     client=client[0] if client else None)
