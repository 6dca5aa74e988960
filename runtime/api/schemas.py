"""Request bodies of the control API; its answers are `runtime.wire`'s (re-exported here)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from runtime.sessions.titles import checked_title
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


class SessionUpdate(StrictBody):
    """`PATCH /v1/sessions/{id}`: a new title, a profile to switch to, or both."""

    title: str | None = Field(None, description="one printable line, at most 200 characters")
    profile: str | None = Field(None, pattern=NAME_PATTERN,
                                description="one of GET /v1/sessions/{id}/profiles")

    @field_validator("title")
    @classmethod
    def _title(cls, value: str | None) -> str | None:
        return None if value is None else checked_title(value)


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
    "SessionOut", "SessionUpdate", "StrictBody", "TenantCreate", "TenantOut", "TokenCreate",
    "TokenInfo", "TokenOut", "ToolOut", "VerifyOut",
]
