"""What crosses the hop for a background process of a session on a node (JSON, checked).

Why: as for a call (`runtime.nodes.wire.RunOnNode`), the control plane names the session
and the node resolves its own directories; a process adds its record id, its lifetime cap,
the command's stdin frame (never on argv) and a few environment variables. Egress the
policy granted travels by value, as a call's does: the request's `network` and
`egress_allowlist` (bounded here), for the proxy the node starts. Acting on a running
process (`ProcessAct`: input, EOF, a signal) names the process and its session, and the
node acts only on a process of that session. What comes back is pickled by Ray from the
node: the container's id, batches of `OutputChunk`, then one `ProcessEnd`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from runtime.nodes.wire import RunOnNode, Where

PROCESS_ID = r"^p_[0-9a-f]{16}$"
MAX_FRAME = 1024 * 1024  # the command (and its cwd) as sent on stdin
MAX_INPUT = 16 * 1024 * 1024  # one `input` write
MAX_EGRESS_HOSTS = 1024  # allowlist entries of one process (each a host name, <= 255)
Signal = Literal["INT", "TERM", "KILL", "HUP"]


class ProcessOnNode(BaseModel):
    """Start one process: `run` is the call's request (names only, validated as a call's),
    `frame` the command on its stdin, `env` the launch hooks' variables, `home` its HOME."""

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_bytes="base64",
                              val_json_bytes="base64")

    run: RunOnNode
    record: str = Field(pattern=PROCESS_ID)
    lifetime_s: float = Field(gt=0, le=7 * 24 * 3600)
    frame: bytes = Field(max_length=MAX_FRAME)
    env: dict[str, str] = Field(default_factory=dict, max_length=32)
    home: str | None = Field(None, pattern=r"^/[A-Za-z0-9_./-]{0,255}$")
    ports: list[int] = Field(default_factory=list, max_length=16)  # served by its relay

    @model_validator(mode="after")
    def _plain(self) -> ProcessOnNode:
        if self.run.gated or self.run.objects or self.run.stdin:
            raise ValueError("a process takes no gate, objects or stdin beside its frame")
        if self.run.request.exec_id != self.record:
            raise ValueError("a process's request is named by its record")
        if any(not 1024 <= p <= 65535 for p in self.ports):
            raise ValueError("a port is 1024-65535")
        allow = self.run.request.egress_allowlist
        if len(allow) > MAX_EGRESS_HOSTS or any(len(host) > 255 for host in allow):
            raise ValueError(f"an egress allowlist is at most {MAX_EGRESS_HOSTS} host names")
        return self


class PortOpen(Where):
    """A byte stream to a declared port of a running process of the session (on the node)."""

    port: int = Field(ge=1024, le=65535)


class ProcessAct(Where):
    """One act on a running process of the session: `input` (`data`), `eof`, `signal`;
    `end`: kill and remove it now (a control plane that died left its stream unread)."""

    process: str = Field(pattern=PROCESS_ID)
    op: Literal["input", "eof", "signal", "end"]
    data: bytes = Field(b"", max_length=MAX_INPUT)
    signal: Signal | None = None

    @model_validator(mode="after")
    def _complete(self) -> ProcessAct:
        if (self.op == "signal") != (self.signal is not None):
            raise ValueError("a signal is named by, and only by, op signal")
        return self


class ProcessEnd(BaseModel):
    """The last item of a process's stream: its container's exit state."""

    model_config = ConfigDict(frozen=True)

    exit_code: int | None
    oom_killed: bool = False


# -- adoption after a control-plane restart (`NodeAgent.process_attach`) ----------------------

class ProcessAttach(Where):
    """Re-attach a process of the session the node still holds (a restarted control plane
    adopting it): its output from `offset` on (where the control plane's log ends)."""

    process: str = Field(pattern=PROCESS_ID)
    offset: int = Field(ge=0)


class ProcessAttached(BaseModel):
    """The first item of a re-attached stream: the container, where its output starts again
    (past `ProcessAttach.offset` only when the node no longer holds that much of it), its
    lifetime cap (from its start), and whether its stdin still takes input."""

    model_config = ConfigDict(frozen=True)

    container: str
    offset: int
    lifetime_s: float
    stdin_open: bool
