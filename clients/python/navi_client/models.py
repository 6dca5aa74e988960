"""What the client reads more loosely than the server writes it (the rest of the answers are
`navi_client.wire`'s, the server's own models).

Audit records and events are read with `extra="allow"`: a newer server's added fields are
kept (an audit record's hash covers them) instead of refused, and a record an older server
wrote (without `action`, `object`) still reads.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

TokenRole = Literal["admin", "tenant_admin", "user", "auditor"]


class AuditRecord(BaseModel):
    """One record of the hash-chained audit log (README "Audit"); fields beyond these (the
    digests and sizes of inputs and outputs, limits, …) are kept as extras."""

    model_config = ConfigDict(frozen=True, extra="allow")

    seq: int
    ts: str
    kind: str
    action: str = "exec"
    object: str | None = None
    tenant: str
    user: str | None = None
    session: str | None = None
    exec_id: str | None = None
    tool: str | None = None
    decision: str | None = None
    rule: str | None = None
    reason: str | None = None
    exit_code: int | None = None
    detail: str | None = None
    prev_hash: str
    hash: str


class Event(BaseModel):
    """A session event (README "Events"): `id` (the resume point), `type`, `ts` and the
    type's own fields as extras (`event.model_extra`, or `event["content"]`)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    id: int | None = None
    type: str
    ts: float | None = None

    def __getitem__(self, key: str) -> Any:
        return (self.model_extra or {})[key]

    def get(self, key: str, default: Any = None) -> Any:
        return (self.model_extra or {}).get(key, default)


class ExecChunk(BaseModel):
    """Output of a streamed exec as it is produced (an `exec_output` event)."""

    model_config = ConfigDict(frozen=True)

    exec_id: str
    stream: Literal["stdout", "stderr"]
    data: str = Field(description="UTF-8 text as the program wrote it (invalid bytes replaced)")
