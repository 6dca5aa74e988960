"""Navi's Python client: the control API, blocking (`NaviClient`) or for asyncio
(`AsyncNaviClient`), answering pydantic models (`navi_client.wire`, the server's own) and
raising one exception tree (`NaviAPIError` and its subclasses, with the API's `code`,
`message`, `status` and `Retry-After`).

    with NaviClient("http://127.0.0.1:8000", token) as navi:
        session = navi.create_session()
        print(navi.exec(session.id, "terminal", {"command": "uname -a"}).stdout)

It needs httpx and pydantic only (the `navi-client` distribution, `clients/python/` in
Navi's repository); the server's `runtime.client` re-exports it.
"""

from navi_client.aio import AsyncNaviClient
from navi_client.errors import (
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
from navi_client.models import AuditRecord, Event, ExecChunk, TokenRole
from navi_client.sync import NaviClient
from navi_client.wire import (
    CancelOut,
    ExecOut,
    FileEntryOut,
    HealthOut,
    KernelError,
    KernelInfoOut,
    KernelResultOut,
    MessageOut,
    PreviewOut,
    ProcessOut,
    ProcessOutputOut,
    QuestionOut,
    SessionOut,
    SnapshotOut,
    TenantOut,
    TokenInfo,
    TokenOut,
    ToolOut,
    TurnOut,
    VerifyOut,
)

__version__ = "0.1.0"

__all__ = [
    "AsyncNaviClient", "AuditRecord", "AuthenticationError", "BadRequestError", "CancelOut",
    "ConflictError", "Event", "ExecChunk", "ExecOut", "FileEntryOut", "HealthOut",
    "InvalidPathSegment", "KernelError", "KernelInfoOut", "KernelResultOut", "MessageOut",
    "NaviAPIError", "NaviClient", "NaviClientError", "NotFoundError", "PayloadTooLargeError",
    "PermissionDeniedError", "PolicyDeniedError", "PreviewOut", "ProcessOut",
    "ProcessOutputOut", "QuestionOut", "RateLimitError", "ResponseTooLarge", "ServerError",
    "ServiceUnavailableError", "SessionOut", "SnapshotOut", "TenantOut", "TokenInfo",
    "TokenOut", "TokenRole", "ToolOut", "TurnOut", "VerifyOut",
]
