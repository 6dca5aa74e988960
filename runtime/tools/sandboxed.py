"""The one place where tools hand work to the Executor (quota, policy, audit, sandbox).

Tools describe *what* to run (`SandboxCall`: argv, stdin, extra read-only mounts); the
Executor decides whether, in which image and with which limits, records it in the audit
log and runs it. This adapter turns its answer into `SandboxOutcome`, whose `metadata()` is
what tools put in `ToolResult.metadata` (the fields `POST /v1/sessions/{id}/exec` answers).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from runtime.errors import SandboxError
from runtime.policy.decision import Action, Decision
from runtime.sandbox.models import ExecResult, Mount
from runtime.tools.base import ToolContext


class SandboxCall(BaseModel):
    model_config = ConfigDict(frozen=True)

    argv: list[str] = Field(min_length=1)
    stdin: bytes = b""
    mounts: list[Mount] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)


class SandboxOutcome(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    result: ExecResult
    decision: Decision | None = None
    audit_seq: int | None = None
    timeout_s: float | None = None

    def metadata(self) -> dict[str, Any]:
        r = self.result
        return {
            "exec_id": r.exec_id,
            "exit_code": r.exit_code,
            "stdout": r.stdout.decode("utf-8", errors="replace"),
            "stderr": r.stderr.decode("utf-8", errors="replace"),
            "timed_out": r.timed_out,
            "oom_killed": r.oom_killed,
            "truncated": r.truncated,
            "duration_ms": r.duration_ms,
            "audit_seq": self.audit_seq,
            "timeout_s": self.timeout_s,
            "rule": self.decision.rule if self.decision else None,
        }


async def run_sandboxed(ctx: ToolContext, action: Action, call: SandboxCall) -> SandboxOutcome:
    """Run `call` through the context's Executor under `action`; policy errors propagate."""
    if ctx.executor is None:
        raise SandboxError("no executor available for this call")
    raise NotImplementedError("wired once runtime/executor.py lands")
