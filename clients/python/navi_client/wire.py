"""The control API's answers as pydantic models: the one definition the server (`runtime.wire`
re-exports it) and the client share.

It imports pydantic only, so the client installs and imports it without FastAPI, Docker or
SQLite; `runtime.api.schemas` re-exports these beside the request bodies, which stay on the
server (their limits come from its configuration). The answers of the processes, kernels,
previews and questions routes are at the end: the server builds them with models of its own
(`runtime.processes`, `runtime.kernels`, `runtime.ports`, `runtime.questions`), and a test
(`tests/unit/test_client_models.py`) holds these to the same fields.
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


# ---- processes, kernels, previews, questions (fourth wave) -------------------------------

ProcessState = Literal["running", "exited"]
Signal = Literal["INT", "TERM", "KILL", "HUP"]


class ProcessOut(BaseModel):
    """A background process (`POST /v1/sessions/{id}/processes`); `reason` once it ended:
    `exited`, `stopped`, `lifetime`, `session_ended`, `interrupted`, `oom`, `revoked`."""

    id: str
    name: str | None = None
    command: str
    cwd: str
    state: ProcessState
    exit_code: int | None = None
    reason: str | None = None
    started_at: float
    ended_at: float | None = None
    ports: list[int] = Field(default_factory=list)
    node: str = "local"
    runtime: str = "runc"
    kind: str = Field("command", description='"command", or "agent" for a sub-agent')


class ProcessOutputOut(BaseModel):
    """A process's combined stdout+stderr log from byte offset `since`: read on from `next`;
    `first` is the oldest offset still kept."""

    output: str
    next: int
    first: int
    state: ProcessState
    exit_code: int | None = None


class KernelError(BaseModel):
    """The exception an execute raised (`KernelDied` when the kernel itself died)."""

    name: str
    value: str
    traceback: list[str] = Field(default_factory=list)


class KernelResultOut(BaseModel):
    """A kernel execute's answer: output, `results` (the last expression's value and each
    display, by MIME type: `text/plain`, `image/png` as base64, `text/html`), the error."""

    ok: bool
    stdout: str
    stderr: str
    results: list[dict[str, str]]
    error: KernelError | None
    execution_count: int | None
    kernel: str
    restored: list[str] = Field(description="names brought back from the saved state")
    lost: list[str] = Field(description="names that could not be saved")
    timed_out: bool = False
    duration_ms: int
    exec_id: str
    audit_seq: int | None
    node: str = "local"


class KernelInfoOut(BaseModel):
    name: str
    state: Literal["running", "saved"]
    started_at: float | None
    last_used_at: float | None


class PreviewOut(BaseModel):
    """A preview link: `url` works without a token until `expires_at` (Unix time), its
    revocation, or the end of the process serving the port."""

    id: str
    url: str
    port: int
    expires_at: float


class QuestionOut(BaseModel):
    """A question the agent asked (`ask_user`); `status` "pending" until it is answered."""

    question_id: str
    session: str
    question: str
    options: list[str] | None = None
    status: str
    answer: str | None = None
    turn_id: str | None = None
    created_at: float
    expires_at: float | None = None
    answered_by: str | None = None


__all__ = [
    "CancelOut", "ClusterNodeOut", "ExecOut", "Execution", "FileEntryOut", "HealthOut",
    "KernelError", "KernelInfoOut", "KernelResultOut", "MessageOut", "MessageRole",
    "PreviewOut", "ProcessOut", "ProcessOutputOut", "ProcessState", "QuestionOut", "Runtime",
    "SessionOut", "Signal", "SnapshotOut", "TenantOut", "TokenInfo", "TokenOut", "ToolOut",
    "TurnOut", "VerifyOut",
]
