"""The Executor's typed vocabulary: what a caller hands it and what it answers.

`Invocation` (what a tool runs; `runtime.sandbox.models`), an `InvocationFor` built from the
decision, the `Approver` that resolves a policy `ask`, exec ids, and `ExecOutcome`: the
run's result with the decision and audit seqs behind it.
"""

from __future__ import annotations

import functools
import re
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from runtime.policy.decision import Action, Decision, Subject
from runtime.sandbox.models import ExecResult, Execution, Invocation

__all__ = ["EXEC_ID", "Approver", "ExecOutcome", "Invocation", "InvocationFor", "new_exec_id",
           "valid_exec_id"]

# An approver answers truthy to approve; its answer may carry `decided_by` for the audit.
Approver = Callable[[Subject, Action, Decision], Awaitable[Any]]
EXEC_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

InvocationFor = Callable[[Decision], Invocation | Awaitable[Invocation]]
"""An invocation built from the decision (after admission, before the intent)."""


def new_exec_id() -> str:
    return "ex_" + secrets.token_hex(12)


def valid_exec_id(exec_id: str) -> bool:
    return EXEC_ID.fullmatch(exec_id) is not None


class ExecOutcome(BaseModel):
    model_config = ConfigDict(frozen=True)

    result: ExecResult
    decision: Decision
    exec_id: str
    audit_seq: int = Field(description="seq of the outcome record")
    intent_seq: int
    timeout_s: float
    node: str = "local"

    @property
    def ok(self) -> bool:
        return self.result.ok

    @functools.cached_property
    def execution(self) -> Execution:
        """The exec result (`POST /v1/sessions/{id}/exec`, `navi exec --json`)."""
        r = self.result
        return Execution(
            ok=r.ok, exit_code=r.exit_code,
            stdout=r.stdout.decode("utf-8", errors="replace"),
            stderr=r.stderr.decode("utf-8", errors="replace"),
            timed_out=r.timed_out, oom_killed=r.oom_killed, truncated=r.truncated,
            duration_ms=r.duration_ms, exec_id=self.exec_id, audit_seq=self.audit_seq,
            timeout_s=self.timeout_s, runtime=self.decision.limits.runtime, node=self.node)

    def public(self) -> dict[str, Any]:
        """`execution()` as JSON (tools' metadata)."""
        return self.execution.model_dump()
