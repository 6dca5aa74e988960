"""The client's one exception tree: the API's error envelope as exceptions.

Every error answer is `{"error": {"code", "message", ...details}}`; `NaviAPIError` carries
them with the HTTP status and `Retry-After`, and its subclass says the status family, so a
caller catches `RateLimitError` or `PolicyDeniedError` rather than comparing numbers. A
streamed exec that fails mid-stream (its last frame an `error` event) raises the same
exceptions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


class NaviClientError(Exception):
    """Anything the client raises on purpose."""


class InvalidPathSegment(NaviClientError, ValueError):
    """A path or id with a '.' or '..' segment: refused before anything is sent."""


class ResponseTooLarge(NaviClientError):
    """An answer larger than the caller's `max_bytes` (refused before its body is read)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"the answer is {size} bytes, more than the {limit} allowed")
        self.size = size
        self.limit = limit


class NaviAPIError(NaviClientError):
    """An error answer of the API: `status`, its `code` and `message`, the envelope's other
    fields in `details` (e.g. `rule`, `retry_after`), and `Retry-After` in seconds."""

    def __init__(self, status: int, code: str, message: str,
                 details: Mapping[str, Any] | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details: dict[str, Any] = dict(details or {})
        self.retry_after = retry_after

    @property
    def rule(self) -> str | None:
        """The policy rule that decided, when the answer names one."""
        rule = self.details.get("rule")
        return rule if isinstance(rule, str) else None


class BadRequestError(NaviAPIError):
    """400 and 422: the request itself is wrong."""


class AuthenticationError(NaviAPIError):
    """401: no token, or one that is unknown, revoked or expired."""


class PermissionDeniedError(NaviAPIError):
    """403: the role may not do this."""


class PolicyDeniedError(PermissionDeniedError):
    """403 `policy_denied`: the policy refused the call (`rule` says which rule)."""


class NotFoundError(NaviAPIError):
    """404 (also what another tenant's objects answer)."""


class ConflictError(NaviAPIError):
    """409: e.g. a turn already runs in the session, a tenant of that name exists."""


class PayloadTooLargeError(NaviAPIError):
    """413: an upload above the tenant's limit."""


class RateLimitError(NaviAPIError):
    """429: a quota or rate limit; `retry_after` says when to try again."""


class ServerError(NaviAPIError):
    """5xx."""


class ServiceUnavailableError(ServerError):
    """503: the audit log, the container engine, an image or the model is unavailable."""


_BY_STATUS: dict[int, type[NaviAPIError]] = {
    400: BadRequestError, 422: BadRequestError, 401: AuthenticationError,
    403: PermissionDeniedError, 404: NotFoundError, 409: ConflictError,
    413: PayloadTooLargeError, 429: RateLimitError, 503: ServiceUnavailableError,
}


def error_class(status: int, code: str) -> type[NaviAPIError]:
    if status == 403 and code == "policy_denied":
        return PolicyDeniedError
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    return ServerError if status >= 500 else NaviAPIError


def _seconds(value: object) -> float | None:
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return seconds if seconds >= 0 else None


def api_error(status: int, envelope: Mapping[str, Any],
              retry_after_header: str | None = None) -> NaviAPIError:
    """The exception for an `{"code", "message", ...}` error object (the envelope's inside)."""
    details = {k: v for k, v in envelope.items() if k not in ("code", "message", "status")}
    code = str(envelope.get("code") or "http_error")
    message = str(envelope.get("message") or "")
    retry_after = _seconds(retry_after_header)
    if retry_after is None:
        retry_after = _seconds(details.get("retry_after"))
    return error_class(status, code)(status, code, message, details, retry_after)


def error_from_response(status: int, body: bytes, retry_after_header: str | None
                        ) -> NaviAPIError:
    """An error answer's exception; a body that is not the envelope (a proxy's page) keeps
    its first 300 characters as the message."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict):
        text = body[:300].decode("utf-8", "replace")
        error = {"code": "http_error", "message": text}
    return api_error(status, error, retry_after_header)
