"""The one table from the runtime's exceptions to HTTP; every error body is the same envelope.

`{"error": {"code": str, "message": str, ...details}}`. No traceback ever reaches a client:
unexpected exceptions are logged with their stack on the server and answered with a 500
envelope that carries only an opaque reference.
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from runtime import errors
from runtime.logging import get_logger

log = get_logger(__name__)

STATUS_BY_ERROR: list[tuple[type[errors.NaviError], int]] = [
    (errors.InvalidPath, 400),
    (errors.Unprocessable, 422),
    (errors.InvalidInput, 400),
    (errors.PayloadTooLarge, 413),
    (errors.DiskFull, 507),
    (errors.Unauthorized, 401),
    (errors.PolicyDenied, 403),
    (errors.Forbidden, 403),
    (errors.NotFound, 404),
    (errors.Conflict, 409),
    (errors.QuotaExceeded, 429),
    (errors.AuditUnavailable, 503),
    (errors.NodeUnavailable, 503),
    (errors.EngineUnavailable, 503),
    (errors.RuntimeUnavailable, 503),
    (errors.ImageMissing, 503),
    (errors.SandboxError, 500),
    (errors.LLMUnavailable, 503),
    (errors.LLMError, 502),
    (errors.PortUnreachable, 502),
    (errors.ConfigError, 500),
]

_HTTP_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 413: "too_large", 415: "unsupported_media_type",
               422: "invalid_request", 429: "quota_exceeded"}


def status_for(exc: errors.NaviError) -> int:
    for cls, status in STATUS_BY_ERROR:
        if isinstance(exc, cls):
            return status
    return 500


def error_response(status: int, code: str, message: str, **details: Any) -> JSONResponse:
    headers = {}
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    if "retry_after" in details:
        headers["Retry-After"] = str(int(details["retry_after"]))
    body = {"error": {"code": code, "message": message, **details}}
    return JSONResponse(body, status_code=status, headers=headers)


def _json_safe(value: Any) -> Any:
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return str(value)


async def _navi_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, errors.NaviError)
    status = status_for(exc)
    if status >= 500:
        log.warning("request_failed", code=exc.code, message=exc.message)
    return error_response(status, exc.code, exc.message, **_json_safe(exc.details))


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = [
        {"loc": [str(p) for p in err.get("loc", ())], "msg": str(err.get("msg", ""))}
        for err in exc.errors()[:20]
    ]
    loc, msg = (problems[0]["loc"], problems[0]["msg"]) if problems else ([], "invalid request")
    message = f"{'.'.join(loc)}: {msg}" if loc else str(msg)
    if loc == ["body"] and not _is_json(request.headers.get("content-type", "")):
        # e.g. `curl -d '{...}'` without -H: curl sends form data, the JSON body goes unread
        message += " (send the body as JSON, with the header Content-Type: application/json)"
    return error_response(422, "invalid_request", message, problems=problems)


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


async def _http_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
    return error_response(exc.status_code, code, message)


async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
    ref = uuid.uuid4().hex[:12]
    log.error("unhandled_error", ref=ref, exc_info=exc)
    return error_response(500, "internal_error", f"internal error (reference {ref})", ref=ref)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(errors.NaviError, _navi_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
