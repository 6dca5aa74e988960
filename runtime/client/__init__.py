"""Navi's Python client: the control API, blocking (`NaviClient`) or for asyncio
(`AsyncNaviClient`), answering the server's own pydantic models and raising one exception
tree (`NaviAPIError` and its subclasses, with the API's `code`, `message`, status and
`Retry-After`).

    with NaviClient("http://127.0.0.1:8000", token) as navi:
        session = navi.create_session()
        print(navi.exec(session.id, "terminal", {"command": "uname -a"}).stdout)

It needs httpx and pydantic only: importing it loads nothing of the server.
"""

from runtime.client.aio import AsyncNaviClient
from runtime.client.errors import (
    AuthenticationError,
    BadRequestError,
    ConflictError,
    InvalidPathSegment,
    NaviAPIError,
    NaviClientError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    PolicyDeniedError,
    RateLimitError,
    ResponseTooLarge,
    ServerError,
    ServiceUnavailableError,
)
from runtime.client.models import (
    AuditRecord,
    Event,
    ExecChunk,
    ExecOut,
    FileEntryOut,
    MessageOut,
    SessionOut,
    SnapshotOut,
    TenantOut,
    TokenInfo,
    TokenOut,
    ToolOut,
    TurnOut,
    VerifyOut,
)
from runtime.client.sync import NaviClient

__all__ = [
    "AsyncNaviClient", "AuditRecord", "AuthenticationError", "BadRequestError",
    "ConflictError", "Event", "ExecChunk", "ExecOut", "FileEntryOut", "InvalidPathSegment",
    "MessageOut",
    "NaviAPIError", "NaviClient", "NaviClientError", "NotFoundError", "PayloadTooLargeError",
    "PermissionDeniedError", "PolicyDeniedError", "RateLimitError", "ResponseTooLarge",
    "ServerError", "ServiceUnavailableError", "SessionOut", "SnapshotOut", "TenantOut",
    "TokenInfo", "TokenOut", "ToolOut", "TurnOut", "VerifyOut",
]
