"""Records the store hands out: frozen pydantic models, never raw rows.

Plaintext tokens and token hashes never appear in a record; ``create_token`` returns the
plaintext once, next to its record.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from runtime.store.ids import (
    SESSION_ID_PATTERN,
    TENANT_ID_PATTERN,
    TOKEN_ID_PATTERN,
    TenantId,
    TenantName,
)

# admin: the server operator (operator tenant only); tenant_admin: manages its own tenant.
Role = Literal["admin", "tenant_admin", "user", "auditor"]
ROLES: tuple[Role, ...] = ("admin", "tenant_admin", "user", "auditor")

# Same shape as the API's NAME_PATTERN: letters, digits, '_', '.', '-'; starts alphanumeric.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
LABEL_MAX = 100
TITLE_MAX = 200
LOCAL_NODE = "local"  # a session's node without a cluster


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Tenant(_Record):
    id: TenantId = Field(pattern=TENANT_ID_PATTERN)
    name: TenantName = Field(pattern=NAME_PATTERN)
    created_at: float = Field(description="Unix time, seconds")


class TokenRecord(_Record):
    id: str = Field(pattern=TOKEN_ID_PATTERN)
    tenant_id: TenantId = Field(pattern=TENANT_ID_PATTERN)
    role: Role
    name: str | None = Field(None, max_length=LABEL_MAX)
    created_at: float = Field(description="Unix time, seconds")
    expires_at: float | None = Field(None, description="Unix time; None: never expires")
    revoked_at: float | None = None


class SessionRecord(_Record):
    id: str = Field(pattern=SESSION_ID_PATTERN)
    tenant_id: TenantId = Field(pattern=TENANT_ID_PATTERN)
    profile: str = Field(pattern=NAME_PATTERN)
    created_at: float = Field(description="Unix time, seconds")
    title: str | None = Field(None, max_length=TITLE_MAX)
    node: str = Field(LOCAL_NODE, description='its cluster node; "local" without a cluster')
