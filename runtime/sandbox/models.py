"""Typed boundary of the sandbox: what a caller asks for and what comes back."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from runtime.egress.report import EgressReport
from runtime.wire import Execution as Execution  # re-exported: its home is the wire models
from runtime.wire import Runtime

MiB = 1024 * 1024

SAFE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
"""Ids that become container labels and host path components (artifacts)."""


class Limits(BaseModel):
    """Resource limits of one execution. Defaults: docs/sandbox.md; a policy may only lower them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    timeout_s: float = Field(30.0, gt=0, le=300)
    memory_mb: int = Field(512, ge=16, le=65536)
    pids: int = Field(256, ge=8, le=32768)
    cpus: float = Field(1.0, gt=0, le=64)
    tmp_mb: int = Field(64, ge=1, le=65536)
    output_bytes: int = Field(1 * MiB, ge=1024, le=256 * MiB, description="cap per stream")
    nofile: int = Field(1024, ge=16, le=1048576)
    fsize_mb: int = Field(1024, ge=1, le=65536, description="largest file a process may write")
    runtime: Runtime = Field("runc", description="runc: the host kernel behind seccomp; gvisor: "
                             "a user-space kernel (runsc) between the code and the host's")
    allow_root: bool = Field(False, description="a call may run as uid 0 (gvisor only)")


class Mount(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    source: Path
    target: str
    read_only: bool = True


class Invocation(BaseModel):
    """What to run (a tool's part of a call); where (image), how long and with which limits
    is the policy's call, added by the Executor in the `ExecRequest` it makes of it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    argv: list[str] = Field(min_length=1)
    stdin: bytes = b""
    env: dict[str, str] = Field(default_factory=dict)
    workspace: Path | None = None
    workdir: str = "/workspace"
    tmp: Path | None = Field(None, description="the session's tmp directory, bind-mounted "
                             "read-write at /tmp (HOME); None: a fresh tmpfs there")
    mounts: list[Mount] = Field(default_factory=list)
    root: bool = Field(False, description="run as uid 0 inside the sandbox: only where the "
                       "decision's limits say allow_root under gvisor")


class ExecRequest(Invocation):
    """One call: a fresh container runs ``argv`` with ``stdin`` and the workspace as cwd,
    in ``image`` under ``limits`` (the `Invocation` plus what the policy decided)."""

    image: str
    limits: Limits = Field(default_factory=Limits)
    network: Literal["none", "egress"] = Field(
        "none", description="the container's network is always none; egress: through the "
        "execution's allowlisting proxy (runtime/egress), for egress_allowlist only")
    egress_allowlist: list[str] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    exec_id: str = Field(pattern=SAFE_ID_PATTERN)
    tenant: str = "local"
    session: str = Field("local", pattern=SAFE_ID_PATTERN)
    node: str = Field("local", max_length=128, description="the node that runs it: "
                      "`runtime.nodes.NodeBackends` picks that node's backend")
    uid: int | None = Field(None, ge=1, description="uid:gid to run as (the tenant's); "
                            "None: the backend's configured sandbox uid")


    @model_validator(mode="after")
    def _root_only_where_allowed(self) -> ExecRequest:
        if self.root and not (self.limits.allow_root and self.limits.runtime == "gvisor"):
            raise ValueError("root inside the sandbox needs limits allow_root under gvisor")
        return self

    @model_validator(mode="after")
    def _egress_needs_a_list(self) -> ExecRequest:
        if (self.network == "egress") != bool(self.egress_allowlist):
            raise ValueError("network egress goes with a non-empty egress_allowlist, none without")
        return self


class OutputChunk(BaseModel):
    model_config = ConfigDict(frozen=True)

    stream: Literal["stdout", "stderr"]
    data: bytes


class ExecResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    exec_id: str
    exit_code: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    oom_killed: bool = False
    truncated: bool = False
    duration_ms: int
    image_digest: str | None = None
    stdout_size: int = Field(0, description="bytes produced before truncation")
    stderr_size: int = 0
    egress: EgressReport | None = Field(None, description="what egress did (network egress)")
    artifacts: list[str] = Field(
        default_factory=list,
        description="host paths of full outputs kept on truncation, outside the workspace "
        "(<data_dir>/artifacts/<session>/<exec_id>.stdout|.stderr)",
    )

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.oom_killed
