"""`kernel_exec` and `kernel_reset`: Python whose names live between calls.

`kernel_exec` runs code in one of the session's kernels (`runtime.kernels`): variables,
imports and functions stay for the next call; the last expression's value and each display
(matplotlib figures as PNG, pandas tables as HTML) come back as results, PNGs also as images
the model can look at. `kernel_reset` forgets a kernel. Both go through the kernel service,
which runs every execute as an execution (decided as `kernel_exec`, audited).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Protocol

from pydantic import Field

from runtime.errors import NotFound
from runtime.executor import Approver, ExecOutcome
from runtime.kernels.models import DEFAULT_KERNEL, KernelResult, result_text
from runtime.policy.decision import Action, Subject
from runtime.sandbox.backend import OutputCallback
from runtime.tools.base import BuiltinTool, ToolContext, ToolParams, ToolResult

KERNEL_NAME = r"^[a-z0-9_-]{1,32}$"
MAX_IMAGES = 4


class Kernels(Protocol):
    """What the tools need of `runtime.kernels.KernelService`."""

    async def run(self, subject: Subject, name: str, code: str, *,
                  timeout_s: float | None = None, on_output: OutputCallback | None = None,
                  exec_id: str | None = None, approver: Approver | None = None,
                  workspace: Path | None = None, tmp: Path | None = None
                  ) -> tuple[KernelResult, ExecOutcome]: ...

    async def reset(self, subject: Subject, name: str) -> bool: ...


class KernelExecParams(ToolParams):
    code: str = Field(min_length=1, max_length=1 << 20, description="Python code to run")
    kernel: str = Field(DEFAULT_KERNEL, pattern=KERNEL_NAME,
                        description="which of the session's kernels (default 'default')")
    timeout_s: float | None = Field(None, gt=0, le=3600,
                                    description="interrupt the code after this many seconds")


class KernelResetParams(ToolParams):
    kernel: str = Field(DEFAULT_KERNEL, pattern=KERNEL_NAME)


def _need(kernels: Kernels | None) -> Kernels:
    if kernels is None:
        raise NotFound("kernels do not run on this server")
    return kernels


class KernelExecTool(BuiltinTool[KernelExecParams]):
    name = "kernel_exec"
    description = (
        "Run Python in a stateful kernel of this session (like a Jupyter notebook): "
        "variables, imports and functions persist between calls; the last expression's "
        "value, matplotlib figures and pandas tables come back as results. Saved when idle "
        "and restored on the next call."
    )
    group = "group:exec"
    Params = KernelExecParams
    runs_in_sandbox: ClassVar[bool] = True

    def __init__(self, kernels: Kernels | None) -> None:
        self.kernels = kernels

    def action(self, args: dict[str, Any], ctx: ToolContext) -> Action:
        return Action(tool=self.name, args=args, group=self.group,
                      timeout_s=args.get("timeout_s") or ctx.timeout_s)

    async def execute(self, params: KernelExecParams, ctx: ToolContext) -> ToolResult:
        result, outcome = await _need(self.kernels).run(
            ctx.subject, params.kernel, params.code,
            timeout_s=params.timeout_s or ctx.timeout_s, on_output=ctx.on_output,
            exec_id=ctx.exec_id, approver=ctx.approver, workspace=ctx.workspace_path,
            tmp=ctx.tmp_path)
        images = [{"type": "image", "media_type": "image/png", "data_b64": r["image/png"],
                   "path": f"kernel:{result.kernel}:{result.execution_count}:{i}"}
                  for i, r in enumerate(result.results) if "image/png" in r][:MAX_IMAGES]
        meta: dict[str, Any] = {"kernel": result.model_dump(exclude={"stdout", "stderr"})}
        if images:
            meta["images"] = images
        execution = outcome.execution.model_copy(update={"ok": result.ok})
        text = result_text(result)
        out = ToolResult(success=result.ok, output=text, metadata=meta, execution=execution,
                         rule=outcome.decision.rule,
                         error=None if result.ok else _error_line(result))
        return out


def _error_line(result: KernelResult) -> str:
    if result.error is None:
        return "the code did not finish"
    return f"{result.error.name}: {result.error.value}"[:2000]


class KernelResetTool(BuiltinTool[KernelResetParams]):
    name = "kernel_reset"
    description = ("Forget a kernel of this session: its names, imports and saved state; the "
                   "next kernel_exec starts it empty.")
    group = "group:exec"
    Params = KernelResetParams

    def __init__(self, kernels: Kernels | None) -> None:
        self.kernels = kernels

    async def execute(self, params: KernelResetParams, ctx: ToolContext) -> ToolResult:
        had = await _need(self.kernels).reset(ctx.subject, params.kernel)
        return ToolResult.ok(f"kernel {params.kernel!r} reset" if had
                             else f"kernel {params.kernel!r} was not running", kernel=params.kernel,
                             existed=had)
