"""Request and response bodies of the control API (input and public variants kept apart)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from runtime.sandbox.models import Execution
from runtime.store import MAX_EXPIRES_IN_S

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class StrictBody(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SessionCreate(StrictBody):
    profile: str | None = Field(None, pattern=NAME_PATTERN)
    title: str | None = Field(None, max_length=200)


class SessionOut(BaseModel):
    id: str
    profile: str
    title: str | None = None
    created_at: float


class ExecBody(StrictBody):
    tool: str = Field(pattern=NAME_PATTERN)
    args: dict[str, Any] = Field(default_factory=dict)
    timeout_s: float | None = Field(
        None, gt=0, allow_inf_nan=False,
        description="seconds; above the policy maximum it is clamped (the result says)")


class ExecOut(Execution):
    """DESIGN's exec result (`Execution`'s fields, `ok` as the Executor decided it) and what
    the tool itself said."""

    output: str | None = Field(None, description="the tool's own output (e.g. a summary)")
    error: str | None = Field(None, description="why the tool failed, when it says")
    metadata: dict[str, Any] = Field(default_factory=dict)


class FileEntryOut(BaseModel):
    path: str
    size: int
    mtime: float


class ToolOut(BaseModel):
    name: str
    description: str
    group: str
    parameters: dict[str, Any]


class ApprovalDecisionBody(StrictBody):
    decision: Literal["approve", "deny"]


class TenantCreate(StrictBody):
    name: str = Field(pattern=NAME_PATTERN)


class TenantOut(BaseModel):
    id: str
    name: str


class TokenCreate(StrictBody):
    role: Literal["admin", "tenant_admin", "user", "auditor"]
    name: str | None = Field(None, max_length=100, validation_alias=AliasChoices("name", "label"),
                             description="a note on what the token is for")
    expires_in_s: int | None = Field(
        None, ge=1, le=MAX_EXPIRES_IN_S, description="seconds until it stops working")


class TokenOut(BaseModel):
    """A new token: the plaintext is in this answer only."""

    id: str
    token: str
    role: str
    name: str | None = None
    expires_at: float | None = Field(None, description="Unix time; null: never")
    tenant: str


class TokenInfo(BaseModel):
    """A token as listed: never the plaintext."""

    id: str
    tenant: str
    role: str
    name: str | None = None
    created_at: float
    expires_at: float | None = None
    revoked_at: float | None = None


class VerifyOut(BaseModel):
    ok: bool
    records: int
    first_bad_seq: int | None


class HealthOut(BaseModel):
    status: Literal["ok"]
    version: str
