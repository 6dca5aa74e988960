"""The one exception tree of the runtime; ``runtime.api.errors`` maps it to HTTP, nothing else does.

    NaviError
    ├── ConfigError                 bad settings or policy file
    ├── InvalidInput                bad arguments from a caller (400/422)
    │   ├── InvalidPath             a workspace path that is unsafe or not allowed
    │   └── Unprocessable           well-formed but not acceptable here (422)
    ├── PayloadTooLarge             upload or disk limit (413)
    │   └── DiskQuotaExceeded       a session's or tenant's disk quota (413 disk_quota)
    ├── DiskFull                    the server's data disk has no room (507)
    ├── Unauthorized                missing or bad token (401)
    │   └── TokenRevoked            a running turn's token was revoked or expired
    ├── Forbidden                   wrong role (403)
    │   ├── PolicyDenied            the policy engine said deny (403, names the rule)
    │   └── PermissionDenied        a session file's mode bits refuse the sandbox uid (403)
    ├── NotFound                    unknown, or another tenant's (404)
    ├── Conflict                    state does not allow it (409)
    │   ├── SessionBusy             a call or file operation holds the session (409 session_busy)
    │   └── PortInUse               a running process of the session declares the port (409)
    ├── QuotaExceeded               per-tenant quota (429, retry_after)
    │   ├── DiskQuotaBusy           the tenant's quota is held by sessions in use (429 disk_quota)
    │   ├── RefusalRateExceeded     too many refused calls; none recorded (429 refusal_rate)
    │   └── ChangeRateExceeded      too many allowed changes (429 change_rate; a refusal)
    ├── AuditUnavailable            audit store not writable: nothing runs (503)
    ├── AuditIntegrityError         the chain does not verify
    ├── PortUnreachable             nothing listens on a session's declared port (502)
    ├── LLMError                    the model server answered badly (502)
    │   └── LLMUnavailable          no model server answered (503)
    ├── SandboxError                the sandbox broke (not: the user's program failed)
    │   ├── EngineUnavailable       Docker engine unreachable
    │   ├── RuntimeUnavailable      the policy's runtime tier is not on the engine (503)
    │   ├── ImageMissing            sandbox image not built
    │   └── ImageBuildError         a sandbox image could not be built
    ├── ClusterError                the local cluster could not be built, read or ended
    └── NodeUnavailable             a session's cluster node does not answer (503)
"""

from __future__ import annotations

from typing import Any


class NaviError(Exception):
    code = "internal_error"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class ConfigError(NaviError):
    code = "config_error"


class InvalidInput(NaviError):
    code = "invalid_input"


class InvalidPath(InvalidInput):
    code = "invalid_path"


class Unprocessable(InvalidInput):
    """A well-formed value this state cannot take (e.g. an answer not among the options)."""

    code = "invalid_request"


class PayloadTooLarge(NaviError):
    code = "too_large"


class DiskQuotaExceeded(PayloadTooLarge):
    code = "disk_quota"


class DiskFull(NaviError):
    code = "disk_full"


class Unauthorized(NaviError):
    code = "unauthorized"


class TokenRevoked(Unauthorized):
    """The token a running agent turn acts with was revoked or expired: the turn stops."""

    code = "token_revoked"


class Forbidden(NaviError):
    code = "forbidden"


class PolicyDenied(Forbidden):
    code = "policy_denied"

    def __init__(self, message: str, *, rule: str, **details: Any) -> None:
        super().__init__(message, rule=rule, **details)
        self.rule = rule


class PermissionDenied(Forbidden):
    """The files API acts as the sandbox uid: what the sandbox made unreadable or read-only
    is refused to it too."""

    code = "permission_denied"


class NotFound(NaviError):
    code = "not_found"


class Conflict(NaviError):
    code = "conflict"


class SessionBusy(Conflict):
    code = "session_busy"


class PortInUse(Conflict):
    """Another running process of the session declared that port."""

    code = "port_in_use"


class QuotaExceeded(NaviError):
    code = "quota_exceeded"

    def __init__(self, message: str, *, retry_after: int, **details: Any) -> None:
        super().__init__(message, retry_after=retry_after, **details)
        self.retry_after = retry_after


class DiskQuotaBusy(QuotaExceeded):
    """The tenant's disk quota is full of sessions in use: none could be released for this."""

    code = "disk_quota"


class RefusalRateExceeded(QuotaExceeded):
    """A tenant past its rate of refused calls: this refusal is answered, not recorded."""

    code = "refusal_rate"


class ChangeRateExceeded(QuotaExceeded):
    """A tenant past its rate of allowed state changes (writes, snapshots, shares...)."""

    code = "change_rate"


class AuditUnavailable(NaviError):
    code = "audit_unavailable"


class AuditIntegrityError(NaviError):
    code = "audit_integrity"


class PortUnreachable(NaviError):
    """A session's declared port has no listener yet (or its process's relay is down)."""

    code = "port_unreachable"


class LLMError(NaviError):
    code = "llm_error"


class LLMUnavailable(LLMError):
    code = "llm_unavailable"


class SandboxError(NaviError):
    code = "sandbox_error"


class EngineUnavailable(SandboxError):
    code = "engine_unavailable"


class RuntimeUnavailable(SandboxError):
    """The policy asks for a runtime (gvisor) the engine does not have: never run on another."""

    code = "runtime_unavailable"


class ImageMissing(SandboxError):
    code = "image_missing"


class ImageBuildError(SandboxError):
    code = "image_build_failed"


class ClusterError(NaviError):
    """`navi cluster local`: a namespace, engine or Ray process could not be made or ended."""

    code = "cluster_error"


class NodeUnavailable(NaviError):
    """A session's execution node (its Ray node agent) is dead or unreachable; the message
    names the node. Its sessions' calls and file operations answer 503 until it is back."""

    code = "node_unavailable"

    def __init__(self, node: str, message: str | None = None) -> None:
        super().__init__(message or f"node {node} is unavailable", node=node)
        self.node = node
