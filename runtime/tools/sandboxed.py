"""The one place where tools hand work to the Executor (quota, policy, audit, sandbox).

Tools describe *what* to run as an `Invocation` (argv, stdin, extra read-only mounts); the
Executor decides whether, in which image and with which limits, records it in the audit
log and runs it with the session workspace (from the `ToolContext`) as working directory.
`exec_metadata` is what tools put in `ToolResult.metadata`: the exec result's fields
(`POST /v1/sessions/{id}/exec`) plus the deciding rule; `with_run` puts the run itself,
typed, on the tool's result (`ToolResult.execution`, `ToolResult.rule`): that is how the
caller learns what ran, never through the context.
"""

from __future__ import annotations

import inspect
from typing import Any

from runtime.errors import SandboxError
from runtime.executor import ExecOutcome, Invocation, InvocationFor
from runtime.policy.decision import Action, Decision
from runtime.tools.base import ToolContext, ToolResult

__all__ = ["ExecOutcome", "Invocation", "exec_metadata", "run_sandboxed", "with_run"]


async def run_sandboxed(
    ctx: ToolContext, action: Action, invocation: Invocation | InvocationFor
) -> ExecOutcome:
    """Run `invocation` (or the one built from the decision) through the context's Executor
    under `action`; errors propagate (`PolicyDenied`, `QuotaExceeded`, `AuditUnavailable`,
    `SandboxError`)."""
    if ctx.executor is None:
        raise SandboxError("no executor available for this call")
    workspace, tmp = ctx.workspace_path, ctx.tmp_path

    def in_workspace(ready: Invocation) -> Invocation:
        # the session's /tmp goes with its files: a call without them keeps a tmpfs
        if ready.workspace is None and workspace is not None:
            return ready.model_copy(update={"workspace": workspace, "tmp": tmp})
        return ready

    async def built(decision: Decision) -> Invocation:
        assert not isinstance(invocation, Invocation)
        ready = invocation(decision)
        return in_workspace(await ready if inspect.isawaitable(ready) else ready)

    chosen: Invocation | InvocationFor = (
        in_workspace(invocation) if isinstance(invocation, Invocation) else built)
    outcome: ExecOutcome = await ctx.executor.execute(
        ctx.subject, action, chosen,
        on_output=ctx.on_output, exec_id=ctx.exec_id, approver=ctx.approver,
    )
    return outcome


def with_run(result: ToolResult, outcome: ExecOutcome) -> ToolResult:
    """`result` carrying the run behind it: its typed `execution` (unless the tool set one)
    and the rule that allowed it."""
    execution = result.execution if result.execution is not None else outcome.execution
    return result.model_copy(update={"execution": execution, "rule": outcome.decision.rule})


def exec_metadata(outcome: ExecOutcome) -> dict[str, Any]:
    meta = outcome.public()
    meta["rule"] = outcome.decision.rule
    return meta
