"""What one audit record holds, and how its hash is computed (the chain's only definition).

``hash = SHA-256(canonical_json(record without "hash"))`` where the record includes
``prev_hash``, so each record commits to everything before it. Canonical JSON is sorted keys,
no whitespace, ASCII only (every control character and non-ASCII code point escaped, so a
record is always one safe line), no NaN. Verification hashes the stored JSON object as it
is, so records written by an older or newer schema still verify.

Inputs and outputs are never stored, only their SHA-256 digest and size.

``action`` and ``object`` came later: a record written before them has neither in its body
(its hash covers what it has, so it still verifies) and reads back as ``action="exec"``,
``object=None``. ``node`` (the cluster node of an execution) likewise: absent before it, read
back as ``None``.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

GENESIS_HASH = "0" * 64
Kind = Literal["intent", "outcome", "denied", "interrupted", "approval", "action"]
# What a record is about: `exec` for everything on an execution's path (intent, outcome,
# denials, approvals inside a call), else the state change it decided (kind `action`).
StateChange = Literal[
    "session.create", "session.delete", "session.update", "file.write", "file.delete",
    "file.move", "tool.write", "tool.delete", "tool.reload", "token.create", "token.revoke",
    "tenant.create", "approval.decide", "session.profile", "secret.set", "secret.delete",
    "memory.save", "memory.forget", "note.write", "file.share", "file.publish", "share.revoke",
    "snapshot.create", "snapshot.restore", "snapshot.delete", "session.fork", "port.link",
    "process.start", "process.exit", "process.signal", "process.input",
    "question.ask", "question.answer", "memory.section", "plan.enter", "plan.exit",
]
AuditAction = Literal[Literal["exec"], StateChange]
MAX_TEXT = 2000


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def digest_json(value: Any) -> tuple[str, int]:
    """SHA-256 and size of the canonical JSON of a value (tool arguments)."""
    raw = canonical_json(value).encode("ascii")
    return sha256_hex(raw), len(raw)


def record_hash(body: dict[str, Any]) -> str:
    """The hash of a record: over every field except ``hash`` itself (prev_hash included)."""
    return sha256_hex(canonical_json({k: v for k, v in body.items() if k != "hash"}).encode())


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


class AuditEntry(BaseModel):
    """What a caller appends; the log adds seq, ts, instance, prev_hash and hash."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Kind
    action: AuditAction = Field("exec", description="exec, or the state change decided")
    object: str | None = Field(None, description="what it touched: path, token id, session…")
    tenant: str
    user: str | None = None
    session: str | None = None
    exec_id: str | None = None
    tool: str | None = None
    args_sha256: str | None = None
    args_size: int | None = None
    stdin_sha256: str | None = None
    stdin_size: int | None = None
    tool_hash: str | None = Field(None, description="content hash of a user tool's file")
    decision: str | None = Field(None, description="allow | deny | ask (approval: approved…)")
    rule: str | None = None
    reason: str | None = None
    image: str | None = None
    image_digest: str | None = None
    limits: dict[str, Any] | None = None
    exit_code: int | None = None
    timed_out: bool | None = None
    oom_killed: bool | None = None
    truncated: bool | None = None
    stdout_sha256: str | None = None
    stdout_size: int | None = None
    stderr_sha256: str | None = None
    stderr_size: int | None = None
    duration_ms: int | None = None
    detail: str | None = Field(None, description="error code, approver, cancellation cause…")
    parent_turn: str | None = Field(None, description="the turn whose sub-agent made the call")
    secrets: list[str] | None = Field(None, description="names of the secrets the call was "
                                      "given (never their values)")
    node: str | None = Field(None, description="the cluster node an execution ran on")

    @field_validator("reason", "detail", "rule", "tool", "tenant", "user", "session", "exec_id",
                     "object")
    @classmethod
    def _cap(cls, value: str | None) -> str | None:
        return value[:MAX_TEXT] if value is not None else None


class AuditRecord(AuditEntry):
    model_config = ConfigDict(frozen=True, extra="allow")

    seq: int
    ts: str
    instance: str | None = None
    prev_hash: str
    hash: str

    @classmethod
    def from_body(cls, body: str) -> AuditRecord:
        return cls.model_validate(json.loads(body))
