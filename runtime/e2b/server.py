"""The `/e2b` mount: one ASGI app that routes E2B's two sides on one address.

The SDK sends control calls (`E2B_API_URL`) and sandbox calls (`E2B_SANDBOX_URL`) to the same
base here; sandbox calls carry `E2b-Sandbox-Id` (and `E2b-Sandbox-Port`: envd's 49983 or the
code interpreter's 49999). With that header, Connect paths go to the process and filesystem
services, the rest (`/health`, `/files`, `/execute`, `/contexts`) to the sandbox's HTTP app;
without it, to the control app. Each child sees paths without the `/e2b` prefix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from runtime.e2b import control, envd_http, interpreter
from runtime.e2b.errors import error_json, navi_error_json
from runtime.e2b.filesystem import filesystem_app
from runtime.e2b.process import process_app
from runtime.errors import NaviError
from runtime.logging import get_logger

if TYPE_CHECKING:
    from runtime.e2b.deps import BridgeDeps

log = get_logger(__name__)
PREFIX = "/e2b"


def _json_app(get_services: Callable[[], BridgeDeps], *routers: Any) -> FastAPI:
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    app.state.get_services = get_services
    for router in routers:
        app.include_router(router)

    async def navi_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, NaviError)
        return navi_error_json(exc)

    async def invalid(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return error_json(400, f"invalid request: {where} {first.get('msg', '')}".strip())

    async def http_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        return error_json(exc.status_code, str(exc.detail))

    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("e2b_internal_error", error=repr(exc))
        return error_json(500, "internal error")

    app.add_exception_handler(NaviError, navi_error)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)
    return app


class E2BServer:
    """Mounted at `/e2b` (`starlette.routing.Mount`)."""

    def __init__(self, get_services: Callable[[], BridgeDeps]) -> None:
        self.control = _json_app(get_services, control.router)
        self.sandbox = _json_app(get_services, envd_http.router, interpreter.router)
        self.connect: dict[str, Any] = {"/process.Process/": process_app(get_services),
                        "/filesystem.Filesystem/": filesystem_app(get_services)}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1003})
            return
        path: str = scope["path"]
        root = scope.get("root_path", "")
        for prefix in (root, PREFIX):
            if prefix and path.startswith(prefix):
                path = path[len(prefix):]
                break
        child_scope = {**scope, "path": path or "/", "raw_path": (path or "/").encode(),
                       "root_path": ""}
        headers = dict(scope.get("headers") or [])
        if b"e2b-sandbox-id" not in headers:
            await self.control(child_scope, receive, send)
            return
        for prefix, app in self.connect.items():
            if path.startswith(prefix):
                await app(child_scope, receive, send)
                return
        await self.sandbox(child_scope, receive, send)
