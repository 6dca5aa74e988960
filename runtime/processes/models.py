"""What a background process is at the boundaries: the start request, the record the API
lists, an answer of its output log, a wait's result, a piece of live output.

`ProcessInfo` is the public JSON (the same for every kind); `ProcessRecord` adds what only
the supervisor needs (tenant, container, the token that started it) and never leaves it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from runtime.wire import ProcessOut

State = Literal["running", "exited"]
Reason = Literal["exited", "stopped", "lifetime", "session_ended", "interrupted", "oom",
                 "revoked"]
SignalName = Literal["INT", "TERM", "KILL", "HUP"]
Stream = Literal["stdout", "stderr"]

MAX_COMMAND = 16 * 1024
MAX_NAME = 64
MAX_PORTS = 16
MAX_ANSWER = 1024 * 1024
"""The most one output answer returns."""


class StartSpec(BaseModel):
    """What to start. `cwd`: relative to /workspace, or absolute under /workspace or /tmp."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    command: str = Field(min_length=1, max_length=MAX_COMMAND)
    cwd: str | None = Field(None, max_length=1024)
    env: dict[str, str] = Field(default_factory=dict)
    name: str | None = Field(None, min_length=1, max_length=MAX_NAME)
    ports: list[int] = Field(default_factory=list, max_length=MAX_PORTS)
    tool: str = Field("process_start", description="the tool the policy decides")


class ProcessInfo(ProcessOut):
    """One process as the API and tools show it (`kind: "command"` for ours): the fields of
    the client's ``ProcessOut`` (one definition of the answer for both sides)."""

    model_config = ConfigDict(frozen=True)


class ProcessRecord(ProcessInfo):
    """A row of the `processes` table: the public fields and the supervisor's own."""

    tenant_id: str
    session_id: str
    container: str | None = None
    token_id: str | None = None
    token_expires_at: float | None = None
    output_bytes: int = 0

    def public(self) -> ProcessInfo:
        return ProcessInfo(**self.model_dump(include=set(ProcessInfo.model_fields)))


class ProcessOutput(BaseModel):
    """The output log from `since` (bytes; `first`: the oldest offset still kept)."""

    model_config = ConfigDict(frozen=True)

    output: str
    next: int
    first: int
    state: State
    exit_code: int | None = None


class OutputPiece(BaseModel):
    """Live output as it arrived: its first byte's offset in the log, and its stream."""

    model_config = ConfigDict(frozen=True)

    offset: int
    data: bytes
    stream: Stream = "stdout"


class WaitResult(BaseModel):
    """How a wait ended: a line matched, the process exited, or the timeout came."""

    model_config = ConfigDict(frozen=True)

    matched: bool
    line: str | None = None
    exited: bool
    timed_out: bool
    process: ProcessInfo
    recent: str = Field("", description="the last lines of output (at most 4 KiB)")
