"""How the CAD tools talk to `/opt/navi/cad.py` in the openscad image.

One call = one fresh container through the Executor: the request is JSON on stdin, the reply
one JSON line on stdout (the helper lets nothing else write there), OpenSCAD's log arrives
on stderr (streamed live to `ctx.on_output`). The helper exits 0 when the model was built,
linted clean or drawn and 1 when it failed, so the exec result's `ok` (exit code 0) means
the same as the tool's `success`. `run_cad` returns the outcome and the parsed
reply; `failure` turns an outcome without a usable reply into the tool's answer:
timed out, out of memory, or the helper ended without replying. A helper that cannot
confine itself (no Landlock) is the sandbox being broken, not the model failing: that is a
`SandboxError`, like a protocol violation.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from runtime.errors import SandboxError
from runtime.policy.decision import Action
from runtime.tools.base import ToolContext, ToolResult
from runtime.tools.sandboxed import ExecOutcome, Invocation, exec_metadata, run_sandboxed

HELPER_ARGV = ["python3", "-I", "-B", "/opt/navi/cad.py"]
EXIT_BAD_REQUEST = 2
EXIT_NO_CONFINEMENT = 3
MAX_REPLY_CHARS = 64 * 1024


class CadReply(BaseModel):
    """The helper's answer; fields beyond `ok`/`error` depend on the operation."""

    model_config = ConfigDict(extra="allow")

    ok: bool
    error: str | None = None

    def field(self, name: str, default: Any = None) -> Any:
        return (self.model_extra or {}).get(name, default)


def parse_reply(stdout: str) -> CadReply | None:
    """The last JSON line of stdout, or None when there is none."""
    for line in reversed(stdout.strip().splitlines()[-5:]):
        if not line.startswith("{") or len(line) > MAX_REPLY_CHARS:
            continue
        try:
            return CadReply.model_validate(json.loads(line))
        except (ValueError, ValidationError):
            return None
    return None


async def run_cad(
    ctx: ToolContext, action: Action, request: dict[str, Any]
) -> tuple[ExecOutcome, CadReply | None]:
    """Run one helper request in a fresh openscad container (policy, audit, limits apply)."""
    stdin = json.dumps(request, separators=(",", ":")).encode("utf-8")
    # the workspace named here keeps /tmp a tmpfs of the call: the helper's scratch files
    # (lint input, OpenSCAD's temporaries) must not stay in the session's persistent /tmp
    invocation = Invocation(argv=HELPER_ARGV, stdin=stdin, workspace=ctx.workspace_path)
    outcome = await run_sandboxed(ctx, action, invocation)
    result = outcome.result
    reply = None
    if not result.timed_out and not result.oom_killed:
        reply = parse_reply(result.stdout.decode("utf-8", errors="replace"))
    if reply is not None and result.exit_code == EXIT_NO_CONFINEMENT:
        raise SandboxError(f"the CAD sandbox cannot confine OpenSCAD: {reply.error}",
                           exec_id=outcome.exec_id)
    if reply is not None and result.exit_code == EXIT_BAD_REQUEST:
        raise SandboxError(f"the CAD helper refused the request: {reply.error}",
                           exec_id=outcome.exec_id)
    return outcome, reply


def failure(outcome: ExecOutcome, output: str, **extra: Any) -> ToolResult:
    """The answer when the run gave no usable reply (timeout, OOM, helper crash)."""
    meta = {**exec_metadata(outcome), **extra}
    result = outcome.result
    if result.timed_out:
        error = f"timed out after {outcome.timeout_s:g} s"
    elif result.oom_killed:
        error = "killed: out of memory"
    else:
        error = f"the CAD helper ended without a result (exit code {result.exit_code})"
    return ToolResult.fail(error, output=output, **meta)
