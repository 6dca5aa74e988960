"""Navi's errors in E2B's formats, so the SDK raises its own exceptions with our message.

The control side and the sandbox's plain HTTP routes answer `{code: <HTTP status>, message}`
(the SDK's generated client fails on any other body); Connect calls fail with a Connect
error whose code the SDK maps (`NOT_FOUND` -> NotFoundException, `UNAUTHENTICATED` ->
AuthenticationException, ...). The HTTP status of a Navi error comes from the API's one table
(`runtime.api.errors.status_for`), so both worlds agree; a policy refusal keeps its message,
which names the rule that decided.
"""

from __future__ import annotations

from typing import Any

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from starlette.responses import JSONResponse

from runtime.api.errors import status_for
from runtime.errors import NaviError, QuotaExceeded

CONNECT_CODES: dict[int, Code] = {
    400: Code.INVALID_ARGUMENT, 401: Code.UNAUTHENTICATED, 403: Code.PERMISSION_DENIED,
    404: Code.NOT_FOUND, 409: Code.FAILED_PRECONDITION, 413: Code.INVALID_ARGUMENT,
    422: Code.INVALID_ARGUMENT, 429: Code.RESOURCE_EXHAUSTED, 501: Code.UNIMPLEMENTED,
    502: Code.UNAVAILABLE,
    503: Code.UNAVAILABLE, 507: Code.RESOURCE_EXHAUSTED,
}


class Unsupported(NaviError):
    """What E2B offers and Navi does not (pause, PTY, watch, ...): 501 / UNIMPLEMENTED."""

    code = "unsupported"


class SandboxGone(NaviError):
    """A token of a sandbox that was killed or timed out: E2B's proxy answers 502 with
    "... was not found", which the SDK reads as "not running"."""

    code = "sandbox_gone"


def http_status(exc: NaviError) -> int:
    if isinstance(exc, SandboxGone):
        return 502
    return 501 if isinstance(exc, Unsupported) else status_for(exc)


def message_of(exc: NaviError) -> str:
    rule = exc.details.get("rule") if isinstance(exc.details, dict) else None
    if rule and str(rule) not in exc.message:
        return f"{exc.message} (rule {rule})"
    return exc.message


def error_json(status: int, message: str, headers: dict[str, str] | None = None
               ) -> JSONResponse:
    return JSONResponse({"code": status, "message": message}, status_code=status,
                        headers=headers)


def navi_error_json(exc: NaviError) -> JSONResponse:
    headers: dict[str, str] = {}
    if isinstance(exc, QuotaExceeded) and exc.details.get("retry_after") is not None:
        headers["Retry-After"] = str(int(exc.details["retry_after"]))
    return error_json(http_status(exc), message_of(exc), headers)


def connect_error(exc: NaviError) -> ConnectError:
    return ConnectError(CONNECT_CODES.get(http_status(exc), Code.INTERNAL), message_of(exc))


def details(exc: NaviError) -> dict[str, Any]:
    return dict(exc.details) if isinstance(exc.details, dict) else {}
