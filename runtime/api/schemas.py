"""Request bodies of the control API; its answers are `runtime.wire`'s (re-exported here)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from runtime.store import MAX_EXPIRES_IN_S
from runtime.wire import (  # the answers: shared with runtime.client
    ExecOut,
    FileEntryOut,
    HealthOut,
    SessionOut,
    TenantOut,
    TokenInfo,
    TokenOut,
    ToolOut,
    VerifyOut,
)

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class StrictBody(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SessionCreate(StrictBody):
    profile: str | None = Field(None, pattern=NAME_PATTERN)
    title: str | None = Field(None, max_length=200)


class ExecBody(StrictBody):
    tool: str = Field(pattern=NAME_PATTERN)
    args: dict[str, Any] = Field(default_factory=dict)
    timeout_s: float | None = Field(
        None, gt=0, allow_inf_nan=False,
        description="seconds; above the policy maximum it is clamped (the result says)")


class ApprovalDecisionBody(StrictBody):
    decision: Literal["approve", "deny"]


class TenantCreate(StrictBody):
    name: str = Field(pattern=NAME_PATTERN)


class TokenCreate(StrictBody):
    role: Literal["admin", "tenant_admin", "user", "auditor"]
    name: str | None = Field(None, max_length=100, validation_alias=AliasChoices("name", "label"),
                             description="a note on what the token is for")
    expires_in_s: int | None = Field(
        None, ge=1, le=MAX_EXPIRES_IN_S, description="seconds until it stops working")


__all__ = [
    "ApprovalDecisionBody", "ExecBody", "ExecOut", "FileEntryOut", "HealthOut", "SessionCreate",
    "SessionOut", "StrictBody", "TenantCreate", "TenantOut", "TokenCreate", "TokenInfo",
    "TokenOut", "ToolOut", "VerifyOut",
]
