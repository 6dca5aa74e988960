"""The control API's answers as pydantic models: the one definition the server and
`runtime.client` share.

It imports nothing of the server (pydantic only), so a client installs and imports it without
FastAPI, Docker or SQLite; `runtime.api.schemas` re-exports these beside the request bodies,
which stay there (their limits come from the server's configuration).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Runtime = Literal["runc", "gvisor"]
MessageRole = Literal["user", "assistant", "tool", "summary"]


class Execution(BaseModel):
    """The exec result: what a caller (API, agent, CLI) is told about one execution,
    built once by `ExecOutcome.execution` with `ok` from `ExecResult.ok` (exit code 0,
    neither timed out nor out of memory); nobody recomputes it."""

    model_config = ConfigDict(frozen=True)

    ok: bool
    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool
    oom_killed: bool
    truncated: bool
    duration_ms: int
    exec_id: str
    audit_seq: int | None
    timeout_s: float | None = None
    runtime: Runtime | None = Field(
        None, description="the sandbox tier the call ran under (null: it started no container)")
    node: str = "local"  # the cluster node it ran on


class ExecOut(Execution):
    """The exec result (`Execution`'s fields, `ok` as the Executor decided it) and what
    the tool itself said."""

    output: str | None = Field(None, description="the tool's own output (e.g. a summary)")
    error: str | None = Field(None, description="why the tool failed, when it says")
    metadata: dict[str, Any] = Field(default_factory=dict)


class SessionOut(BaseModel):
    id: str
    profile: str
    title: str | None = None
    created_at: float
    node: str = "local"  # the cluster node it lives on
    # "active": its disk is mounted (in use lately); "idle": released, mounted on next use
    state: Literal["active", "idle"] = "idle"


class SnapshotOut(BaseModel):
    """A snapshot of a session's files (`POST /v1/sessions/{id}/snapshots`)."""

    id: str
    name: str | None = None
    created_at: float
    bytes: int = Field(description="what it takes on disk (counted in the tenant's quota)")


class FileEntryOut(BaseModel):
    path: str
    size: int
    mtime: float


class ToolOut(BaseModel):
    name: str
    description: str
    group: str
    parameters: dict[str, Any]


class TenantOut(BaseModel):
    id: str
    name: str


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


class ClusterNodeOut(BaseModel):
    """`GET /v1/cluster/nodes`: one execution node as the control plane sees it."""

    id: str
    address: str
    state: Literal["alive", "dead"]
    sessions: int = Field(description="sessions that live on it (all tenants)")
    running: int = Field(description="executions running on it now")


class HealthOut(BaseModel):
    status: Literal["ok"]
    version: str


class TurnOut(BaseModel):
    turn_id: str
    session: str


class CancelOut(BaseModel):
    turn_id: str
    cancelled: bool


class MessageOut(BaseModel):
    """One row of a session's conversation (``runtime.agent.history`` stores exactly this)."""

    id: int
    turn_id: str
    role: MessageRole
    content: str
    thinking: str | None = None
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    tool_call_id: str | None = None
    tool_name: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)
    created_at: float
